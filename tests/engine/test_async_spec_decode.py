"""Async scheduling with a runner-side drafter (MTP, EAGLE-3, a draft model), forced on on the
CPU: the engine launches verify step N+1 on the drafts step N left on the device before it
reads N's result, the runner moves N+1's positions, slots and context lengths on the device by
the drafts N kept, and nothing a client sees changes. Each drafter runs twice: drafts that are
always kept (self-drafting heads: every step moves its successor by k) and random ones (about
none kept). The oracle is the plain engine's greedy output; the overlap itself is read from the
executor's call order (a launch before the previous step's result)."""
from __future__ import annotations

import pytest

from atom import SamplingParams
from atom.model_engine.messages import EngineRequest
from tests.engine.checkpoints import (add_mtp_layer, local_engine, make_checkpoint,
                                      make_self_drafting_mtp)
from tests.engine.spec_steps import Overlaps, assert_stops_where_plain_stops, flat, run
from tests.engine.spec_steps import spec_engine, spec_prompts
from tests.engine.test_eagle3_spec_decode import (TARGET_LAYERS, _context_free_target,
                                                  make_eagle3, make_self_drafting_eagle3)

MAX_TOKENS = 20
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
ASYNC = "scheduler.async_scheduling=true"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Per method, (target, drafter config overrides) for drafts always kept and random ones."""
    root = tmp_path_factory.mktemp("async_spec")
    context_free = _context_free_target(root / "cf")
    llama = make_checkpoint("llama", root / "llama", num_hidden_layers=TARGET_LAYERS)
    target = make_checkpoint("llama", root / "target")  # its greedy output does not repeat
    small = make_checkpoint("llama", root / "small", seed=5, hidden_size=32,
                            intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                            num_key_value_heads=1)
    eagle3 = lambda head: ("specdecode=eagle3", f"specdecode.draft_model={head}")  # noqa: E731
    draft = lambda d: ("specdecode=draft_model", f"specdecode.draft_model={d}")  # noqa: E731
    return {
        ("mtp", "kept"): (make_self_drafting_mtp(root / "mtp_self"), ("specdecode=mtp",)),
        ("mtp", "random"): (add_mtp_layer(make_checkpoint("deepseek_v3_q_lora", root / "mtp")),
                            ("specdecode=mtp",)),
        ("eagle3", "kept"): (context_free,
                             eagle3(make_self_drafting_eagle3(root / "cf", context_free))),
        ("eagle3", "random"): (llama, eagle3(make_eagle3(root / "llama"))),
        ("draft_model", "kept"): (target, draft(target)),
        ("draft_model", "random"): (target, draft(small)),
    }


def _plain(path, params: SamplingParams = GREEDY) -> list[list[int]]:
    return [flat(c) for c in run(spec_engine(path), spec_prompts(), params)[0]]


def _async(path, method_args, k: int, *extra: str):
    engine = spec_engine(path, ASYNC, *method_args, f"specdecode.num_speculative_tokens={k}",
                         *extra)
    return engine, Overlaps(engine)


CASES = [(m, d) for m in ("mtp", "eagle3", "draft_model") for d in ("kept", "random")]


@pytest.mark.parametrize("method,drafts", CASES)
def test_greedy_output_overlapped_is_the_plain_output(checkpoints, method, drafts):
    path, args = checkpoints[method, drafts]
    engine, overlaps = _async(path, args, 3)
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    got, _ = run(engine, spec_prompts(), params)
    assert [flat(c) for c in got] == _plain(path, params)
    s = engine.core.stats()
    assert s.spec_draft_tokens > 0
    if drafts == "kept":
        assert s.spec_accepted_tokens == s.spec_draft_tokens
    # all but the first launch and the last few of each sequence (too near its length limit
    # for k drafts whatever the step before keeps)
    assert overlaps.count >= 0.6 * overlaps.launches


@pytest.mark.parametrize("method", ["mtp", "eagle3", "draft_model"])
@pytest.mark.parametrize("how", ["max_tokens", "stop_token", "eos"])
def test_a_stop_inside_an_accepted_run_ends_where_the_plain_output_ends(checkpoints, method,
                                                                        how):
    path, args = checkpoints[method, "kept"]
    spec, overlaps = _async(path, args, 3)
    assert_stops_where_plain_stops(spec_engine(path), spec, spec_prompts()[2:3], how,
                                   MAX_TOKENS)
    assert overlaps.count > 0


@pytest.mark.parametrize("method", ["mtp", "eagle3", "draft_model"])
@pytest.mark.parametrize("extra", [("kv_cache.num_blocks=16", "scheduler.reserve_ratio=0",
                                    "scheduler.max_num_batched_tokens=8"),
                                   ("kv_cache.enable_prefix_caching=true",)],
                         ids=["chunked_and_preempting", "prefix_cache"])
def test_preemption_and_prefix_caching_keep_greedy_output(checkpoints, method, extra):
    """The prefix-cache case then asks for a prompt that is an earlier one and its output:
    its hit covers blocks of verified drafts, wrong if a block had kept an unverified one."""
    path, args = checkpoints[method, "kept"]
    engine, overlaps = _async(path, args, 3, *extra)
    plain = spec_engine(path)
    prompts = spec_prompts()
    got = [flat(c) for c in run(engine, prompts, GREEDY)[0]]
    assert got == [flat(c) for c in run(plain, prompts, GREEDY)[0]]
    s = engine.core.stats()
    if "kv_cache.num_blocks=16" in extra:
        assert s.num_preempted_total > 0
    else:
        again = [prompts[3] + got[3][:14]]
        assert flat(run(engine, again, GREEDY)[0][0]) == flat(run(plain, again, GREEDY)[0][0])
        assert engine.core.stats().prefix_cache_hits * 4 >= len(again[0]) - 4
    assert overlaps.count > 0


@pytest.mark.parametrize("method", ["mtp", "eagle3", "draft_model"])
def test_an_abort_while_its_step_is_in_flight_leaves_the_others_exact(checkpoints, method):
    path, args = checkpoints[method, "kept"]
    engine, overlaps = _async(path, args, 3)
    core, prompts = engine.core, spec_prompts()
    for i, p in enumerate(prompts):
        core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=p,
                                       sampling_params=GREEDY))
    tokens: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    reasons: dict[str, str] = {}
    steps = 0
    while core.has_unfinished():
        if steps == 4:
            assert core._inflight is not None  # a step of request 1 runs on the device
            core.abort_requests(["1"])
        for o in core.step():
            tokens[o.request_id] += o.new_token_ids
            if o.finished:
                reasons[o.request_id] = o.finish_reason
        steps += 1
    want = _plain(path)
    assert reasons["1"] == "abort" and len(tokens["1"]) < MAX_TOKENS
    assert tokens["1"] == want[1][:len(tokens["1"])]
    assert [tokens[str(i)] for i in (0, 2, 3)] == [want[i] for i in (0, 2, 3)]
    s = core.stats()
    assert s.kv_blocks_free == s.kv_blocks_total
    assert overlaps.count > 0


@pytest.mark.parametrize("method", ["mtp", "eagle3"])
@pytest.mark.parametrize("length", [1.0, 2.5])
def test_forced_acceptance_draws_the_same_schedule_overlapped(checkpoints, method, length):
    """Batch 1 (the benchmark's): the counts are drawn at each launch in the same order, so
    the overlapped run keeps what the plain-scheduled one keeps, and realizes the length.
    Random drafts kept by the schedule move each step by 1 or 2 over targets whose output
    depends on positions (the context-free ones of the other tests' kept drafts do not):
    for MTP the only check that its moved positions and slots are right."""
    path, args = checkpoints[method, "random"]
    forced = (*args, "specdecode.num_speculative_tokens=3",
              f"specdecode.acceptance_length={length}")
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    runs = []
    for extra in ((), (ASYNC,)):
        engine = spec_engine(path, *forced, *extra)
        overlaps = Overlaps(engine)
        got = [flat(run(engine, [p], params)[0][0]) for p in spec_prompts()[1:3]]
        s = engine.core.stats()
        runs.append((got, s.spec_draft_tokens, s.spec_accepted_tokens, overlaps.count))
    (sync, drafts, accepted, none), (overlapped, drafts_a, accepted_a, some) = runs
    assert (overlapped, drafts_a, accepted_a) == (sync, drafts, accepted)
    assert none == 0 and some > 10
    verify_steps = drafts / 3
    assert abs(1 + accepted / verify_steps - length) < 0.25


def test_sampled_rows_are_not_overlapped_and_stay_reproducible(checkpoints):
    """The rejection sampler reads a sampled row's drafts and their q on the host, so a step
    after one that drafted for such a row waits for it: a seeded request draws the same."""
    path, args = checkpoints["eagle3", "random"]
    params = SamplingParams(temperature=0.8, max_tokens=12, ignore_eos=True, seed=3)
    outs = []
    for extra in ((), (ASYNC,)):
        engine = spec_engine(path, *args, "specdecode.num_speculative_tokens=3", *extra)
        overlaps = Overlaps(engine)
        outs.append([o["token_ids"] for o in engine.generate(spec_prompts()[:2], params)])
        assert overlaps.count == 0
    assert outs[0] == outs[1]


def test_ngram_keeps_the_resolved_path(checkpoints):
    """A core-side proposer reads each sequence's last token: no overlap, same output."""
    path, _ = checkpoints["eagle3", "random"]
    engine = local_engine(path, "kv_cache.block_size=4", ASYNC, "specdecode=ngram",
                          "specdecode.num_speculative_tokens=3")
    overlaps = Overlaps(engine)
    got, _ = run(engine, spec_prompts(), GREEDY)
    assert [flat(c) for c in got] == _plain(path)
    assert overlaps.count == 0


def test_two_ranks_overlap_as_one_process(checkpoints):
    """Tensor parallelism on two gloo ranks (worker processes): each rank moves its own copy
    of the step by its own verdict, rank 0's answer to step N comes after step N+1's launch,
    and the output is one process's."""
    path, args = checkpoints["draft_model", "kept"]
    engine, overlaps = _async(path, args, 2, "parallel.tensor_parallel_size=2")
    try:
        got, _ = run(engine, spec_prompts(), GREEDY)
        s = engine.core.stats()
    finally:
        engine.shutdown()
    assert [flat(c) for c in got] == _plain(path)
    assert s.spec_draft_tokens > 0 and s.spec_accepted_tokens == s.spec_draft_tokens
    assert overlaps.count > 0


def test_logprobs_of_overlapped_steps_are_the_resolved_steps(checkpoints):
    """A moved verify step's logprob records are those of its kept tokens, one per token, as
    the steps resolved one at a time give them."""
    path, args = checkpoints["draft_model", "kept"]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, logprobs=2)
    got, overlapped = [], 0
    for extra in ((), (ASYNC,)):
        engine = spec_engine(path, *args, "specdecode.num_speculative_tokens=3", *extra)
        overlaps = Overlaps(engine)
        for i, p in enumerate(spec_prompts()):
            engine.core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=p,
                                                  sampling_params=params))
        records: dict[str, list] = {}
        while engine.core.has_unfinished():
            for o in engine.core.step():
                records.setdefault(o.request_id, []).extend(o.logprobs or [])
        got.append(records)
        overlapped = overlaps.count
    assert overlapped > 0 and got[0].keys() == got[1].keys()
    for rid, resolved in got[0].items():
        moved = got[1][rid]
        assert [r.token_id for r in moved] == [r.token_id for r in resolved]
        assert len(moved) == params.max_tokens
        for x, y in zip(resolved, moved):
            assert x.logprob == pytest.approx(y.logprob, abs=1e-5)
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
