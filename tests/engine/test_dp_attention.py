"""DP attention on the CPU: two gloo ranks, each running the whole attention over its own
sequences and their KV, the MLPs and MoE over both ranks' rows (gathered, then reduce-scattered).

The oracle is the one-process engine: tp=2 with enable_dp_attention must give its greedy tokens
(and logprobs) for Qwen3-MoE (experts tensor- and expert-parallel) and DeepSeek-V3 (MLA, a dense
first layer, shared experts), through steps where one rank has no sequence, chunked prefills
and a preemption in one rank's pool. The steps the engine sent are recorded on their way to the
ranks, to show that the run went through each of those.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from atom import SamplingParams
from atom.runner.scheduler_output import SchedulerOutput
from tests.engine.checkpoints import local_engine, make_checkpoint

# 8 KV blocks of 16 tokens per rank (one is DP attention's scratch block), 48 tokens a step:
# the 70-token prompt is prefilled in chunks, and the pools run out before the batch ends.
ENGINE = ("kv_cache.num_blocks=8", "scheduler.max_num_batched_tokens=48",
          "scheduler.reserve_ratio=0")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dp_attention")
    return {arch: make_checkpoint(arch, root) for arch in ("qwen3_moe", "deepseek_v3_q_lora")}


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, 256, (k,), generator=g).tolist() for k in (5, 31, 12, 70, 20)]


def _params() -> list[SamplingParams]:
    """Greedy, of several lengths (the ranks' sequences end at different steps); two ask for
    logprobs, of different depths."""
    return [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=k)
            for n, k in ((24, None), (10, 3), (30, None), (16, None), (6, 1))]


def _run(path: Path, *extra: str) -> tuple[list[tuple[list[int], list]], list[SchedulerOutput],
                                           int]:
    """((tokens, logprob records) of each request: the batch's, then one prompt's alone; every
    step the engine sent; the preemptions)."""
    engine = local_engine(path, *ENGINE, *extra)
    sent: list[SchedulerOutput] = []
    executor = engine.core.executor
    execute = executor.execute

    def recording(out: SchedulerOutput):
        sent.append(out)
        return execute(out)

    executor.execute = recording
    records: dict[str, list] = {}
    try:
        done: dict[str, list[int]] = {}
        ids: list[str] = []
        for prompts, params in ((_prompts(), _params()),
                                (_prompts()[1:2], SamplingParams(temperature=0, max_tokens=4))):
            ids += engine.add_request(prompts, params, lambda o: records.setdefault(
                o.request_id, []).extend(o.logprobs or []))
            while not engine.is_finished():
                done.update((d["request_id"], d["token_ids"]) for d in engine.step())
        preempted = engine.stats().num_preempted_total
    finally:
        engine.shutdown()
    return [(done[i], records.get(i, [])) for i in ids], sent, preempted


def _same(dp: list[tuple[list[int], list]], one: list[tuple[list[int], list]]) -> None:
    assert [t for t, _ in dp] == [t for t, _ in one]
    assert [len(r) for _, r in dp] == [len(r) for _, r in one] == [0, 10, 0, 0, 6, 0]
    for (_, a), (_, b) in zip(dp, one):
        for x, y in zip(a, b):
            assert x.token_id == y.token_id
            assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
            assert [t for t, _ in x.top] == [t for t, _ in y.top]


@pytest.mark.parametrize("arch,extra", [("qwen3_moe", ()),
                                        ("qwen3_moe", ("parallel.enable_expert_parallel=true",)),
                                        ("deepseek_v3_q_lora", ())],
                         ids=["qwen3_moe", "qwen3_moe_ep", "deepseek_v3"])
def test_dp_attention_gives_the_one_process_tokens(ckpts, arch, extra):
    one, _, _ = _run(ckpts[arch], "parallel.tensor_parallel_size=1")
    dp, sent, preempted = _run(ckpts[arch], "parallel.tensor_parallel_size=2",
                               "parallel.enable_dp_attention=true", *extra)
    _same(dp, one)
    ranks = [{r.rank for r in out.requests} for out in sent]
    assert {0, 1} in ranks, "both ranks ran sequences in one step"
    assert {0} in ranks or {1} in ranks, "a step where one rank had no sequence"
    assert any(r.num_sampled == 0 for out in sent for r in out.requests), "a chunked prefill"
    assert preempted > 0
