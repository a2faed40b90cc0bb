"""Tensor parallelism on the CPU: two ranks (worker processes on gloo) against one process.

The layers shard by rank and all-reduce at block boundaries; the executor sends each step's
SchedulerOutput to both ranks and reads rank 0's tokens back. Greedy tokens must equal the one-
process run's, with async scheduling on and off, and for every architecture (DeepSeek-V3's MLA
and grouped MoE included) its fp32 logprobs too, through chunked prefill and preemption; a rank
that dies must make the engine fail at once, and shutdown must leave no rank behind.
"""
from __future__ import annotations

import pytest
import torch

from atom import SamplingParams
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.rank_processes import gone, killed_rank_fails_fast, tp_engine, tp_prompts


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("qwen3", tmp_path_factory.mktemp("tp"))


def test_two_ranks_give_the_one_process_tokens(ckpt):
    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    one = tp_engine(ckpt, 1).generate(tp_prompts(), greedy)
    for overlap in ("false", "true"):
        tp = tp_engine(ckpt, 2, f"scheduler.async_scheduling={overlap}")
        try:
            two = tp.generate(tp_prompts(), greedy)
            assert [o["token_ids"] for o in two] == [o["token_ids"] for o in one], overlap
            s = tp.stats()
            assert s.kv_blocks_free == s.kv_blocks_total
            ex = tp.core.executor  # chunked prefills sample nothing: no answer of theirs is kept
            kept = ex.ledger.kept()
            assert kept["answers"] == kept["raised"] == 0, kept
            assert kept["rowless"] <= 1 and kept["statuses"] <= 1, kept
        finally:
            pids = [p.pid for p in tp.core.executor._procs]
            tp.shutdown()
        assert gone(pids), "a rank outlived the engine's shutdown"


def test_fewer_kv_heads_than_ranks_replicate_them(tmp_path):
    """One KV head over two ranks: each rank keeps a copy (its 2 query heads share it)."""
    import transformers

    from tests.engine.checkpoints import COMMON

    cfg = transformers.Qwen3Config(**{**COMMON, "num_key_value_heads": 1, "head_dim": 16})
    torch.manual_seed(1)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "mqa")
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    one = tp_engine(tmp_path / "mqa", 1).generate(tp_prompts(), greedy)
    tp = tp_engine(tmp_path / "mqa", 2)
    try:
        assert tp.core.executor.num_blocks == 64
        two = tp.generate(tp_prompts(), greedy)
    finally:
        tp.shutdown()
    assert [o["token_ids"] for o in two] == [o["token_ids"] for o in one]


def test_a_rank_that_dies_fails_the_engine_at_once(ckpt):
    tp = tp_engine(ckpt, 2)
    try:
        killed_rank_fails_fast(tp, lambda: tp.core.executor._procs[1].pid)
    finally:
        pids = [p.pid for p in tp.core.executor._procs]
        tp.shutdown()
    assert gone(pids)


def test_one_rank_through_the_multiproc_executor_gives_the_one_process_tokens(ckpt):
    """parallel.executor=multiproc at tp=1 (the A/B of benchmarks/ab_multiproc_tp1.sh): one
    worker process, the same tokens as the runner in this process."""
    from atom.executor.multiproc import MultiprocExecutor

    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    one = tp_engine(ckpt, 1).generate(tp_prompts(), greedy)
    mp = tp_engine(ckpt, 1, "parallel.executor=multiproc")
    try:
        assert isinstance(mp.core.executor, MultiprocExecutor)
        assert len(mp.core.executor._procs) == 1
        out = mp.generate(tp_prompts(), greedy)
    finally:
        pids = [p.pid for p in mp.core.executor._procs]
        mp.shutdown()
    assert [o["token_ids"] for o in out] == [o["token_ids"] for o in one]
    assert gone(pids)


def _tokens_and_logprobs(engine, params: SamplingParams) -> tuple[list[list[int]], list[list]]:
    logprobs: dict[str, list] = {}

    def keep(out) -> None:
        logprobs.setdefault(out.request_id, []).extend(out.logprobs or [])

    ids = engine.add_request(tp_prompts(), params, stream_callback=keep)
    done = {}
    while not engine.is_finished():
        for out in engine.step():
            done[out["request_id"]] = out["token_ids"]
    return [done[i] for i in ids], [logprobs[i] for i in ids]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3_q_lora"])
def test_every_architecture_on_two_ranks_matches_one_through_chunks_and_preemption(arch, tmp_path):
    """Greedy tokens equal and fp32 logprobs (the chosen token's and the top 2) within 1e-4,
    with prompts chunked at 48 tokens and a pool of 10 blocks that preempts and recomputes."""
    path = make_checkpoint(arch, tmp_path)
    tight = ("kv_cache.num_blocks=10", "scheduler.reserve_ratio=0", "model.max_model_len=128")
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=2)
    runs = []
    for tp in (1, 2):
        engine = local_engine(path, "scheduler.max_num_batched_tokens=48",
                              f"parallel.tensor_parallel_size={tp}", *tight)
        try:
            runs.append(_tokens_and_logprobs(engine, params))
            assert engine.core.scheduler.num_preempted > 0, "the pool is meant to preempt"
        finally:
            engine.shutdown()
    (tok1, lp1), (tok2, lp2) = runs
    assert tok2 == tok1
    for a, b in zip(lp1, lp2):
        assert len(a) == len(b) == 24
        for x, y in zip(a, b):
            assert x.token_id == y.token_id and abs(x.logprob - y.logprob) < 1e-4
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
            assert all(abs(p - q) < 1e-4 for (_, p), (_, q) in zip(x.top, y.top))


def test_every_rank_writes_its_trace_while_profiling(ckpt, tmp_path):
    """start_profile/stop_profile reach every rank: each writes a torch trace under
    {dir}/rank_{r}, with the steps named, and stop returns once they are written; without a
    dir the start is refused before any rank hears of it."""
    import gzip

    engine = tp_engine(ckpt, 2, f"profiler.torch_profiler_dir={tmp_path}")
    try:
        engine.core.start_profile()
        engine.generate(tp_prompts()[:2], SamplingParams(temperature=0, max_tokens=4))
        engine.core.stop_profile()
        for rank in (0, 1):
            traces = list((tmp_path / f"rank_{rank}").glob("*.json.gz"))
            assert len(traces) == 1, (rank, traces)
            assert b"decode[bs=" in gzip.decompress(traces[0].read_bytes())
        assert engine.generate(tp_prompts()[:1], SamplingParams(max_tokens=2))[0]["token_ids"]
    finally:
        engine.shutdown()
    plain = tp_engine(ckpt, 2, "profiler.torch_profiler_dir=null")
    try:
        with pytest.raises(RuntimeError, match="profiling needs a profiler dir"):
            plain.core.start_profile()
        assert plain.generate(tp_prompts()[:1], SamplingParams(max_tokens=2))[0]["token_ids"]
    finally:
        plain.shutdown()
