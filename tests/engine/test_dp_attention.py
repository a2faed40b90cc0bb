"""DP attention on the CPU: two gloo ranks, each running the whole attention over its own
sequences and their KV, the MLPs and MoE over both ranks' rows (gathered, then reduce-scattered).

The oracle is the one-process engine: tp=2 with enable_dp_attention must give its greedy tokens
(and logprobs) for Qwen3-MoE (experts tensor- and expert-parallel) and DeepSeek-V3 (MLA, a dense
first layer, shared experts), through steps where one rank has no sequence, chunked prefills
and a preemption in one rank's pool, and with async scheduling (each step's pending tokens read
from the previous step's gathered tokens). The steps the engine sent are recorded on their way
to the ranks, to show that the run went through each of those.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from atom import SamplingParams
from atom.runner.dp_attention_runner import PAD_REQUEST, rank_batch
from atom.runner.scheduler_output import ScheduledRequest, SchedulerOutput
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.rank_processes import greedy_tokens

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


Outputs = list[tuple[list[int], list]]  # each request's tokens and logprob records


def _run(path: Path, *extra: str) -> tuple[Outputs, list[SchedulerOutput], int]:
    """(the outputs of each request: the batch's, then one prompt's alone; every step the
    engine sent; the preemptions) of the CPU engine."""
    return _generate(local_engine(path, *ENGINE, *extra))


def _generate(engine) -> tuple[Outputs, list[SchedulerOutput], int]:
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


def _same(dp: Outputs, one: Outputs) -> None:
    assert [t for t, _ in dp] == [t for t, _ in one]
    assert [len(r) for _, r in dp] == [len(r) for _, r in one] == [0, 10, 0, 0, 6, 0]
    for (_, a), (_, b) in zip(dp, one):
        for x, y in zip(a, b):
            assert x.token_id == y.token_id
            assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
            assert [t for t, _ in x.top] == [t for t, _ in y.top]


@pytest.mark.parametrize("arch,extra", [
    ("qwen3_moe", ()), ("qwen3_moe", ("parallel.enable_expert_parallel=true",)),
    ("deepseek_v3_q_lora", ()), ("deepseek_v3_q_lora", ("scheduler.async_scheduling=true",))],
    ids=["qwen3_moe", "qwen3_moe_ep", "deepseek_v3", "deepseek_v3_async"])
def test_dp_attention_gives_the_one_process_tokens(ckpts, arch, extra, capfd):
    one, _, _ = _run(ckpts[arch], "parallel.tensor_parallel_size=1")
    dp, sent, preempted = _run(ckpts[arch], "parallel.tensor_parallel_size=2",
                               "parallel.enable_dp_attention=true", *extra)
    _same(dp, one)
    err = capfd.readouterr().err
    assert all(f"DP attention rank {r} of 2" in err for r in (0, 1)), "the ranks' start-up"
    ranks = [{r.rank for r in out.requests} for out in sent]
    assert {0, 1} in ranks, "both ranks ran sequences in one step"
    assert {0} in ranks or {1} in ranks, "a step where one rank had no sequence"
    assert any(r.num_sampled == 0 for out in sent for r in out.requests), "a chunked prefill"
    assert preempted > 0


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3_q_lora"])
def test_dp_attention_on_the_triton_kernels_gives_the_one_process_tokens(ckpts, arch,
                                                                        monkeypatch):
    """The Triton attention (GQA, MLA) and fused-MoE kernels, interpreted in both ranks, over
    the pad rows (a 40-token prompt's chunk beside another rank's decodes, one-token pads in
    decode steps), give the one-process engine's tokens on the torch reference. Three tokens
    each (an interpreted step costs the ranks seconds)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs CPU tensors; on GPUs the two-GPU test runs them")
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read by each rank's process at its import
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 256, (k,), generator=g).tolist() for k in (5, 31, 12, 40)]

    def tokens(*extra: str) -> list[list[int]]:
        return greedy_tokens(local_engine(ckpts[arch], *ENGINE, *extra), prompts, 3)

    assert tokens("parallel.tensor_parallel_size=2", "parallel.enable_dp_attention=true",
                  "runtime.kernels=triton") == tokens()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3_q_lora"])
def test_dp_attention_on_two_gpus_gives_the_one_gpu_tokens(ckpts, arch):
    """NCCL's all-gather and reduce-scatter, the Triton kernels and the decode graphs (on a
    decode step every rank replays the same size; on any other, none does), in fp32 so that no
    bf16 rounding of the partial sums flips a greedy tie."""
    import atom

    def run(*extra: str):
        return _generate(atom.build_engine(atom.compose([
            "model=local", f"model.path={ckpts[arch]}", "model.dtype=float32",
            "runtime.kernels=triton", "load.progress_bar=false", *ENGINE, *extra])))

    one, _, _ = run()
    dp, _, preempted = run("parallel.tensor_parallel_size=2", "parallel.enable_dp_attention=true")
    _same(dp, one)
    assert preempted > 0


def _request(rid: str, rank: int, n: int, sampled: int = 1) -> ScheduledRequest:
    return ScheduledRequest(rid, 3, [5] * n, [0, 1], sampled, rank=rank)


def test_a_decode_step_pads_each_rank_with_one_token_sequences_to_the_most_rows():
    """Rank 1 has one decode to rank 0's three: two one-token pads keep it decode-shaped (a
    graph of the same size on both); the sampled tokens' places follow the step's order."""
    out = SchedulerOutput([], [_request("a", 0, 1), _request("b", 1, 1), _request("c", 0, 1),
                               _request("d", 0, 1)], [])
    batch = rank_batch(out, rank=1, ranks=2, scratch_block=9, block_size=16)
    assert [(r.request_id, r.token_ids, r.block_table, r.num_sampled)
            for r in batch.out.requests] == [
        ("b", [5], [0, 1], 1), (PAD_REQUEST, [0], [9], 0), (PAD_REQUEST, [0], [9], 0)]
    assert not batch.eager and batch.most == 3 and batch.rows == [0, 1, 2, 3]
    assert batch.index.tolist() == [0, 3, 1, 2]  # a, c, d in rank 0's block, b in rank 1's
    assert rank_batch(out, rank=0, ranks=2, scratch_block=9, block_size=16).out.requests == [
        out.requests[0], out.requests[2], out.requests[3]]


def test_another_step_pads_with_one_sequence_in_the_scratch_block_and_runs_eager():
    """A 40-token chunk (sampling nothing) on rank 0: rank 1, with no request, runs one pad
    sequence of 40 tokens over the scratch block three times (16-token blocks)."""
    out = SchedulerOutput([], [_request("a", 0, 40, sampled=0)], [])
    batch = rank_batch(out, rank=1, ranks=2, scratch_block=9, block_size=16)
    (pad,) = batch.out.requests
    assert (pad.start, pad.token_ids, pad.block_table) == (0, [0] * 40, [9, 9, 9])
    assert batch.eager and batch.rows == [] and batch.most == 0
    assert rank_batch(out, rank=0, ranks=2, scratch_block=9, block_size=16).out.requests == \
        out.requests


def test_a_dp_attention_rank_holds_every_head_and_its_share_of_the_mlps():
    """Built as rank 1 of 2 (no collective runs while building): attention, embedding and LM
    head whole, the dense MLP and every expert split by column as in tensor parallelism."""
    import transformers

    from atom.kernels.backend import get_backend
    from atom.layers.model_context import ModelContext
    from atom.layers.parallel_state import ParallelState
    from atom.models.deepseek_v3 import DeepseekV3ForCausalLM
    from tests.engine.checkpoints import COMMON, DEEPSEEK_ARCHS

    hf = transformers.DeepseekV3Config(**{**COMMON, **DEEPSEEK_ARCHS["deepseek_v3_q_lora"][1]})
    mc = ModelContext(get_backend("torch"), ParallelState(tp_size=2, tp_rank=1),
                      dp_attention=True)
    model = DeepseekV3ForCausalLM(hf, mc)
    dense, sparse = model.model.layers
    assert dense.self_attn.num_heads == sparse.self_attn.num_heads == hf.num_attention_heads
    assert model.lm_head.weight.shape[0] == model.model.embed_tokens.weight.shape[0] == 256
    assert dense.mlp.down_proj.weight.shape[1] == hf.intermediate_size // 2
    assert sparse.mlp.experts.w2.shape[2] == hf.moe_intermediate_size // 2
    assert not (dense.mlp.down_proj.reduce_results or sparse.mlp.reduce_results)
