"""Block tables through the multi-process executor as deltas (atom/executor/block_table_deltas.py),
on gloo ranks at tp=1 and tp=2 against the runner in the engine's own process.

One script runs on each engine with async scheduling on (the GPU's mode): tables that grow
across 8-token blocks, a pool small enough to preempt (the preempted get new tables), a request
aborted mid-generation, two requests whose steps raise (one while the driver encodes it, one as
every rank decodes it: the driver then forgets what the ranks hold and sends whole tables), and
the prompts again for prefix-cache hits. Every request must end as in one process (greedy tokens
and finish reason), the driver must have sent only new blocks on most steps and whole tables
on the step after each raise, and it may hold no table of a request whose end it has told.
"""
from __future__ import annotations

import pytest

from atom import SamplingParams
from atom.executor.block_table_deltas import WHOLE
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.rank_processes import tp_prompts

_POOL = ("kv_cache.block_size=8", "kv_cache.num_blocks=20", "scheduler.reserve_ratio=0",
         "model.max_model_len=128", "kv_cache.enable_prefix_caching=true",
         "scheduler.max_num_batched_tokens=48", "scheduler.async_scheduling=true")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("qwen3", tmp_path_factory.mktemp("tables"))


def _poisoned() -> list[SamplingParams]:
    seed = SamplingParams(temperature=0.8, max_tokens=6, seed=1)
    seed.seed = 2**70  # msgpack cannot carry it: the driver's encode raises
    logprobs = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    logprobs.logprobs = 10**6  # refused as a rank decodes it (in one process, by torch.topk)
    return [seed, logprobs]


def _script(engine) -> dict[str, tuple[str, list[int]]]:
    """Each finished request's (finish reason, tokens)."""
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = tp_prompts()
    ended: dict[str, tuple[str, list[int]]] = {}
    engine.add_request(prompts, greedy)
    aborted = engine.add_request(prompts[1], SamplingParams(temperature=0, max_tokens=90,
                                                            ignore_eos=True))[0]
    steps = 0
    while not engine.is_finished():
        for out in engine.step():
            ended[out["request_id"]] = (out["finish_reason"], out["token_ids"])
        steps += 1
        if steps == 6:
            engine.abort(aborted)
        if steps == 9:
            engine.add_request(prompts[:2], _poisoned())
    for out in engine.generate(prompts, greedy):
        ended[out["request_id"]] = (out["finish_reason"], out["token_ids"])
    return ended


@pytest.fixture(scope="module")
def one_process(ckpt):
    engine = local_engine(ckpt, *_POOL)
    try:
        ended = _script(engine)
        stats = engine.stats()
    finally:
        engine.shutdown()
    assert engine.core.scheduler.num_preempted > 0, "the pool is meant to preempt"
    assert stats.prefix_cache_hits > 0, "the second pass is meant to hit the prefix cache"
    assert sorted(r for r, _ in ended.values()).count("error") == 2
    return ended


def _watch(executor) -> list:
    """Each step's table starts as the driver's real TableSender cut them, and "raised" for a
    step that raised (in the driver's encode, or on the ranks)."""
    log: list = []
    cut, execute, launch_failure = executor._tables.cut, executor.execute, executor.launch_failure

    def watched_cut(out):
        wire, starts = cut(out)
        log.append(starts)
        return wire, starts

    def watched_execute(out):
        try:
            return execute(out)
        except Exception:
            log.append("raised")
            raise

    def watched_launch_failure(number: int):
        failure = launch_failure(number)
        if failure is not None:
            log.append("raised")
        return failure

    executor._tables.cut, executor.execute = watched_cut, watched_execute
    executor.launch_failure = watched_launch_failure
    return log


@pytest.mark.parametrize("tp", [1, 2])
def test_ranks_given_table_deltas_end_every_request_as_one_process(ckpt, one_process, tp):
    engine = local_engine(ckpt, *_POOL, "parallel.executor=multiproc",
                          f"parallel.tensor_parallel_size={tp}")
    try:
        log = _watch(engine.core.executor)
        ended = _script(engine)
        held = set(engine.core.executor._tables._held)
        untold = set(engine.core._gone)
    finally:
        engine.shutdown()
    assert ended == one_process
    steps = [s for s in log if s != "raised"]
    assert sum(any(n != WHOLE for n in s) for s in steps) > len(steps) // 2, "deltas were sent"
    # the step after one that raised: the first cut after the raise (a raise in the encode
    # comes after its own cut)
    after = [next(s for s in log[i + 1:] if s != "raised") for i, s in enumerate(log)
             if s == "raised" and log[i - 1] != "raised"]
    assert len(after) >= 2, "both poisons made steps raise"
    assert all(all(n == WHOLE for n in s) for s in after), after
    assert held <= untold, "the driver keeps tables of requests it told the ranks are gone"


@pytest.mark.gpu
def test_on_one_gpu_a_rank_given_table_deltas_ends_every_request_as_one_process(ckpt):
    """On the GPU a rank's launch is queued, so it extends a held table in place while the step
    before is still running (as the scheduler extends a sequence's list in one process): tp=1
    through the multi-process executor against the runner in this process, fp32 (no bf16 tie
    can flip a greedy token), 16-token blocks."""
    import atom

    pool = [o for o in _POOL if not o.startswith(("kv_cache.block_size", "kv_cache.num_blocks"))]

    def run(*extra: str):
        engine = atom.build_engine(atom.compose([
            "model=local", f"model.path={ckpt}", "model.dtype=float32", "load.progress_bar=false",
            "kv_cache.block_size=16", "kv_cache.num_blocks=12", *pool, *extra]))
        try:
            return _script(engine), engine.core.scheduler.num_preempted
        finally:
            engine.shutdown()

    one, preempted = run()
    assert preempted > 0, "the pool is meant to preempt"
    assert run("parallel.executor=multiproc") == (one, preempted)
