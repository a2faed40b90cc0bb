"""Speculative decoding with the n-gram proposer, end to end on tiny random checkpoints.

Repetitive prompts make the proposer's lookups right often (real acceptance), and greedy
output must still be the plain one token for token; stops (EOS, stop tokens, stop strings,
max_tokens) that land inside a run of accepted tokens must cut the output exactly where the
plain output ends.
"""
from __future__ import annotations

import pytest
import torch

from atom import SamplingParams
from atom.model_engine.messages import EngineRequest
from tests.engine.checkpoints import make_checkpoint, local_engine
from tests.engine.spec_steps import (assert_stops_where_plain_stops, flat as _flat,
                                     inside_runs as _inside_runs, run as _run)

NGRAM = ("specdecode=ngram", "specdecode.num_speculative_tokens=4")
MAX_TOKENS = 40


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def ckpt(request, tmp_path_factory):
    return make_checkpoint(request.param, tmp_path_factory.mktemp(f"ngram_{request.param}"))


def _engine(path, *extra: str):
    return local_engine(path, "kv_cache.block_size=4", *extra)


def _prompts() -> list[list[int]]:
    """Repeated random phrases: what follows a recurring n-gram is often what followed it before."""
    g = torch.Generator().manual_seed(7)
    phrase = lambda n: torch.randint(3, 256, (n,), generator=g).tolist()  # noqa: E731
    return [phrase(8) * 4, phrase(5) * 6 + phrase(3), phrase(11)]


@pytest.fixture(scope="module")
def engines(ckpt):
    return _engine(ckpt), _engine(ckpt, *NGRAM)


def test_greedy_output_with_ngram_is_the_plain_output_in_fewer_steps(engines):
    plain, spec = engines
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    ref, plain_steps = _run(plain, _prompts(), greedy)
    got, spec_steps = _run(spec, _prompts(), greedy)
    assert [_flat(c) for c in got] == [_flat(c) for c in ref]
    s = spec.core.stats()
    assert s.spec_draft_tokens > 0 and s.spec_accepted_tokens > 0
    assert s.spec_accepted_tokens <= s.spec_draft_tokens
    assert spec_steps < plain_steps
    assert any(len(c) > 1 for chunks in got for c in chunks)  # several tokens in one step


@pytest.mark.parametrize("how", ["max_tokens", "stop_token", "eos"])
def test_a_stop_inside_an_accepted_run_ends_where_the_plain_output_ends(engines, how):
    plain, spec = engines
    assert_stops_where_plain_stops(plain, spec, _prompts()[:1], how, MAX_TOKENS)


def test_a_stop_string_inside_an_accepted_run_cuts_the_text_where_plain_does(engines):
    plain, spec = engines
    prompt = _prompts()[:1]
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    chunks = _run(spec, prompt, greedy)[0][0]
    p = _inside_runs(chunks)[0]
    stop = plain.tokenizer.decode(_flat(chunks)[p:p + 1])
    if not stop.strip():
        pytest.skip("the token inside the run decodes to whitespace")
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True,
                            stop_strings=[stop])
    want, got = plain.generate(prompt, params)[0], spec.generate(prompt, params)[0]
    assert got["text"] == want["text"] and got["finish_reason"] == want["finish_reason"] == "stop"
    assert got["token_ids"] == want["token_ids"]


def test_a_step_with_drafts_that_raises_is_isolated_and_the_others_keep_their_output(engines):
    """A request whose sampling raises joins sequences that are verifying drafts: the step is
    rerun in halves with each sequence's drafts, and the others' output is the plain one."""
    plain, spec = engines
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    prompts = _prompts()
    want = [o["token_ids"] for o in plain.generate(prompts, greedy)]
    ids = spec.add_request(prompts, greedy)
    results: dict[str, dict] = {}
    running = spec.core.scheduler.running
    while not any(seq.spec_token_ids for seq in running):  # the next step verifies drafts
        for done in spec.step():
            results[done["request_id"]] = done
    poison = SamplingParams(temperature=0.8, max_tokens=6, seed=1)
    poison.seed = 2**70  # torch.Generator.manual_seed raises on it, inside the step
    drafts_before = spec.stats().spec_draft_tokens
    bad = spec.add_request(prompts[0], poison)[0]
    while not spec.is_finished():
        for done in spec.step():
            results[done["request_id"]] = done
    assert results[bad]["finish_reason"] == "error"
    assert [results[i]["token_ids"] for i in ids] == want
    assert spec.stats().spec_draft_tokens > drafts_before
    s = spec.stats()
    assert s.kv_blocks_free == s.kv_blocks_total


@pytest.mark.parametrize("extra", [("scheduler.async_scheduling=true",),
                                   ("kv_cache.num_blocks=24",),
                                   ("kv_cache.enable_prefix_caching=true",)],
                         ids=["async", "preempting", "prefix_cache"])
def test_async_scheduling_and_preemption_keep_greedy_output(ckpt, engines, extra):
    """With async scheduling asked for, a proposer still waits for each step's tokens; with a
    cache too small for the batch, preempted sequences are recomputed and speculate again; with
    prefix caching, blocks holding verified tokens only are shared (a second run hits them)."""
    plain, _ = engines
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    want = [o["token_ids"] for o in plain.generate(_prompts(), greedy)]
    spec = _engine(ckpt, *NGRAM, *extra)
    got, _ = _run(spec, _prompts(), greedy)
    assert [_flat(c) for c in got] == want
    s = spec.core.stats()
    assert s.spec_accepted_tokens > 0
    if "preempting" in str(extra):
        assert s.num_preempted_total > 0
    if "prefix" in str(extra):
        again, _ = _run(spec, _prompts(), greedy)
        assert [_flat(c) for c in again] == want
        assert spec.core.stats().prefix_cache_hits > 0


def test_logprobs_of_kept_tokens_are_the_plain_ones(engines):
    plain, spec = engines
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=2)

    def records(engine):
        core = engine.core
        core.add_request(EngineRequest(request_id="lp", prompt_token_ids=_prompts()[0],
                                       sampling_params=params))
        out = []
        while core.has_unfinished():
            for o in core.step():
                out += o.logprobs or []
        return out

    want, got = records(plain), records(spec)
    assert [r.token_id for r in got] == [r.token_id for r in want]
    assert [r.logprob for r in got] == pytest.approx([r.logprob for r in want], abs=1e-4)
    assert [[t for t, _ in r.top] for r in got] == [[t for t, _ in r.top] for r in want]


def test_seeded_sampling_with_drafts_runs_to_length(engines):
    """Temperature > 0: exact-match verification keeps only the target's own samples; the run
    ends at max_tokens with every block back."""
    _, spec = engines
    params = SamplingParams(temperature=0.7, max_tokens=MAX_TOKENS, ignore_eos=True, seed=3)
    before = spec.core.stats().spec_draft_tokens
    got, _ = _run(spec, _prompts(), params)
    assert [len(_flat(c)) for c in got] == [MAX_TOKENS] * 3
    assert spec.core.stats().spec_draft_tokens > before
