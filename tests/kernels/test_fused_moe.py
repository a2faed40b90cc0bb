"""The fused MoE Triton path against the per-expert loop (torch_ref.fused_moe, float32; for fp8
experts the same loop on dequantized weights with the activations quantized as the kernels
do), the expert-sorted layout against a torch counting sort, and the MoE models end to end.

Routings come from top-k over random router logits, so a token's experts are distinct by
construction, as every router gives them. Tiny shapes run under TRITON_INTERPRET on the CPU
(both configs: 16- and 64-row blocks); R1's (full and the tp8 slice) and Qwen3-30B-A3B's
shapes, and CUDA-graph replay, on the GPU.
"""
from __future__ import annotations

import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.expert_quant import dequantize_experts, quantize_experts
from atom.kernels.triton import moe_align
from atom.kernels.triton.fp8_quant import quant_per_token, quant_per_token_group
from atom.kernels.triton.fused_moe import DECODE, PREFILL, fused_moe
from atom.layers.moe import softmax_topk
from kernel_helpers import DEVICE, INTERPRETED, gpu_param, rel_err, tol
from test_fp8_quant import ref_quant


def moe_case(t: int, num_experts: int, k: int, hidden: int, inter: int, dtype: torch.dtype,
             used: list[int] | None = None, seed: int = 0):
    """x, w13, w2 and a routing; `used` restricts the experts any token may pick (the others
    get no tokens). Weights scaled so activations stay O(1) through both GEMMs."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:  # on the device: R1's w13 is 7.5 G values
        return torch.randn(*shape, generator=g, device=DEVICE)
    x = randn(t, hidden).to(dtype)
    w13 = (randn(num_experts, 2 * inter, hidden) * hidden ** -0.5).to(dtype)
    w2 = (randn(num_experts, hidden, inter) * inter ** -0.5).to(dtype)
    logits = randn(t, num_experts)
    if used is not None:
        keep = torch.zeros(num_experts, dtype=torch.bool, device=DEVICE)
        keep[used] = True
        logits = logits.masked_fill(~keep, float("-inf"))
    weights, experts = softmax_topk(logits, k, renormalize=True)
    return x, w13, w2, weights, experts


def moe_tol(dtype: torch.dtype) -> float:
    """The interpreter truncates every f32 → bf16 (the GPU rounds to nearest), and the path
    rounds seven times (each GEMM, silu, the product, the router weight, the slot rows, the
    sum): the truncations all lean toward zero and add up to ~2% at these shapes."""
    return 3e-2 if INTERPRETED and dtype == torch.bfloat16 else tol(dtype)


def check(x, w13, w2, weights, experts, cfg=None) -> None:
    out = fused_moe(x, w13, w2, weights, experts, cfg)
    ref = torch_ref.fused_moe(x.float(), w13.float(), w2.float(), weights, experts)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert rel_err(out, ref) < moe_tol(x.dtype)


@pytest.mark.parametrize("cfg", [DECODE, PREFILL], ids=["decode_blocks", "prefill_blocks"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t", [1, 3, 17, 40])
def test_fused_moe_matches_the_per_expert_loop(t, dtype, cfg):
    check(*moe_case(t, 8, 2, 64, 32, dtype), cfg=cfg)


@pytest.mark.parametrize("cfg", [DECODE, PREFILL], ids=["decode_blocks", "prefill_blocks"])
def test_experts_without_tokens_are_skipped(cfg):
    check(*moe_case(23, 8, 2, 64, 32, torch.float32, used=[1, 4, 6]), cfg=cfg)


@pytest.mark.parametrize("cfg", [DECODE, PREFILL], ids=["decode_blocks", "prefill_blocks"])
def test_every_token_to_one_expert_spans_several_blocks(cfg):
    x, w13, w2, weights, experts = moe_case(40, 8, 2, 64, 32, torch.float32)
    hot = torch.full_like(experts[:, 0], 5)
    experts[:, 1] = torch.where(experts[:, 0] == 5, experts[:, 1], experts[:, 0])
    experts[:, 0] = hot
    assert (experts[:, 0] != experts[:, 1]).all()
    check(x, w13, w2, weights, experts, cfg=cfg)


def test_hidden_and_intermediate_that_are_not_whole_tiles():
    check(*moe_case(9, 8, 2, 72, 40, torch.float32), cfg=DECODE)


def test_output_is_the_same_run_to_run():
    case = moe_case(40, 8, 2, 64, 32, torch.bfloat16)
    assert torch.equal(fused_moe(*case), fused_moe(*case))


@pytest.mark.parametrize("cfg", [DECODE, PREFILL], ids=["decode_blocks", "prefill_blocks"])
def test_expert_parallel_ranks_skip_the_others_pairs_and_sum_to_the_whole_layer(cfg):
    """Two expert-parallel ranks of four experts each, the routing mapped as FusedMoE maps it
    (another rank's pairs get id 4): each rank's output is the per-expert loop's over the same
    ids, and the two add up to the whole layer's."""
    from atom.kernels.backend import get_backend
    from atom.layers.model_context import ModelContext
    from atom.layers.moe import FusedMoE
    from atom.layers.parallel_state import ParallelState

    x, w13, w2, weights, experts = moe_case(17, 8, 2, 64, 32, torch.float32)
    parts = []
    for rank in (0, 1):
        mc = ModelContext(get_backend("torch"), ParallelState(tp_size=2, tp_rank=rank,
                                                              ep_size=2, ep_rank=rank))
        local = FusedMoE(mc, 8, 64, 32).local_experts(experts)
        assert torch.equal(local == 4, experts // 4 != rank)
        mine = slice(4 * rank, 4 * rank + 4)
        check(x, w13[mine].contiguous(), w2[mine].contiguous(), weights, local, cfg=cfg)
        parts.append(fused_moe(x, w13[mine].contiguous(), w2[mine].contiguous(), weights, local,
                               cfg))
    whole = torch_ref.fused_moe(x, w13, w2, weights, experts)
    assert rel_err(parts[0] + parts[1], whole) < moe_tol(x.dtype)


def torch_layout(experts: torch.Tensor, num_experts: int, block_m: int):
    """The layout align must give, in torch ops: pairs stably sorted by expert, each expert's
    run starting at its padded offset, padding rows = the pair count, block experts by
    searching the padded ends (−1 past the last)."""
    flat = experts.reshape(-1).long()
    pairs = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = padded.cumsum(0)
    order = flat.argsort(stable=True)
    e = flat[order]
    rows = (padded_end - padded)[e] + torch.arange(pairs, device=flat.device) - (
        counts.cumsum(0) - counts)[e]
    cap = moe_align.capacity(pairs, num_experts, block_m)
    sorted_ids = torch.full((cap,), pairs, dtype=torch.int32, device=flat.device)
    sorted_ids[rows] = order.int()
    starts = torch.arange(0, cap, block_m, device=flat.device)
    block_expert = torch.searchsorted(padded_end, starts, right=True)
    return sorted_ids, torch.where(starts < padded_end[-1], block_expert, -1).int()


@pytest.mark.parametrize("t,k,num_experts,block_m,used", [
    (1, 2, 8, 16, None), (40, 2, 8, 16, None), (40, 2, 8, 64, [0, 2, 3, 7]), (7, 2, 8, 64, None),
    (200, 2, 8, 16, [5]),  # 400 pairs: the 1024 chunk; expert 5 alone in slot 0 of many
    (1100, 2, 8, 16, [1, 4, 6]),  # 2200 pairs: three 1024-pair chunks
    (3, 8, 256, 16, None),  # R1's expert count: 257 bins of 512
    (300, 8, 256, 64, None),  # 2400 pairs: 10 chunks, more than one tile of R1's 512 bins
    gpu_param(256, 8, 256, 16, None, id="r1-decode256"),
    gpu_param(8192, 8, 256, 64, None, id="r1-prefill8192"),  # 256 chunks
    gpu_param(4096, 8, 128, 64, None, id="qwen3-30b-prefill4096"),
])
def test_align_lays_pairs_out_as_the_torch_counting_sort(t, k, num_experts, block_m, used):
    _, _, _, _, experts = moe_case(t, num_experts, k, 8, 8, torch.float32, used=used)
    blocks = moe_align.align(experts, num_experts, block_m)
    ids, block_expert = torch_layout(experts, num_experts, block_m)
    assert torch.equal(blocks.sorted_ids, ids)
    assert torch.equal(blocks.block_expert, block_expert)
    pairs = experts.numel()
    assert sorted(ids[ids < pairs].tolist()) == list(range(pairs))


def blocks_of_varied_magnitude(w: torch.Tensor) -> torch.Tensor:
    """w with each 128 × 128 block scaled by its own factor in [1/4, 4]: a scale read from the
    wrong block or channel then shows in the result."""
    e, n, k = w.shape
    g = torch.Generator(device=w.device).manual_seed(7)
    f = 4.0 ** (2 * torch.rand(e, n // 128, k // 128, generator=g, device=w.device) - 1)
    return (w.float() * f.repeat_interleave(128, 1).repeat_interleave(128, 2)).to(w.dtype)


def fp8_reference(x, w13, w13_s, w2, w2_s, weights, experts) -> torch.Tensor:
    """The per-expert loop as an fp8 GEMM computes it, in float32 with x's dtype's roundings
    where the kernel rounds: dequantized weights, and each GEMM's input rounded to e4m3 with
    the kernels' dynamic scales (per token, or per token and 128 columns with block scales).
    Interpreted, Triton's f32 → e4m3 halves ~2% of the codes (a dropped mantissa carry:
    test_fp8_quant), so there the activations are quantized by the same fp8_quant kernels; on
    the GPU by the torch formula, which they match byte for byte."""
    group = 128 if w13_s.dim() == 3 else None

    def seen(a: torch.Tensor) -> torch.Tensor:
        if INTERPRETED:
            q, s = quant_per_token(a) if group is None else quant_per_token_group(a, group)
        else:
            q, s = ref_quant(a, group)
        return q.float() * (s if group is None else s.repeat_interleave(128, 1)[:, :a.shape[1]])
    out = torch.zeros_like(x, dtype=torch.float32)
    for e in experts.unique().tolist():
        tok, slot = (experts == e).nonzero(as_tuple=True)
        g = (seen(x[tok]) @ dequantize_experts(w13[e], w13_s[e]).T).to(x.dtype)
        h = torch_ref.silu_and_mul(g)
        y = (seen(h) @ dequantize_experts(w2[e], w2_s[e]).T).to(x.dtype)
        out.index_add_(0, tok, y.float() * weights[tok, slot].unsqueeze(-1))
    return out


FP8_DTYPE = torch.float32 if INTERPRETED else torch.bfloat16  # interpreted bf16 truncates


@pytest.mark.parametrize("block", [False, True], ids=["per_channel", "block_128"])
@pytest.mark.parametrize("cfg", [DECODE, PREFILL], ids=["decode_blocks", "prefill_blocks"])
@pytest.mark.parametrize("t", [1, 21])
def test_fp8_experts_match_the_fp8_per_expert_loop(t, cfg, block):
    x, w13, w2, weights, experts = moe_case(t, 8, 2, 256, 128, FP8_DTYPE)
    w13, w2 = blocks_of_varied_magnitude(w13), blocks_of_varied_magnitude(w2)
    check_fp8(x, w13, w2, weights, experts, block, cfg)


@pytest.mark.parametrize("block", [False, True], ids=["per_channel", "block_128"])
def test_fp8_experts_whose_hidden_ends_in_a_partial_block(block):
    """hidden 192: w13's last K block and the activations' last group are 64 wide (the tiny
    block-fp8 DeepSeek checkpoints' hidden of 64 is one partial block)."""
    check_fp8(*moe_case(9, 8, 2, 192, 128, FP8_DTYPE), block, DECODE)


def check_fp8(x, w13, w2, weights, experts, block: bool, cfg=None) -> None:
    (w13q, w13s), (w2q, w2s) = quantize_experts(w13, block), quantize_experts(w2, block)
    out = fused_moe(x, w13q, w2q, weights, experts, cfg, w13_scale=w13s, w2_scale=w2s)
    ref = fp8_reference(x, w13q, w13s, w2q, w2s, weights, experts)
    assert out.dtype == x.dtype
    assert rel_err(out, ref) < tol(x.dtype)


@pytest.mark.parametrize("t,num_experts,k,hidden,inter", [
    gpu_param(1, 256, 8, 7168, 2048, id="r1-decode1"),
    gpu_param(64, 256, 8, 7168, 2048, id="r1-decode64"),
    gpu_param(2048, 256, 8, 7168, 2048, id="r1-prefill2048"),
    gpu_param(16, 256, 8, 7168, 256, id="r1-tp8-decode16"),
    gpu_param(2048, 256, 8, 7168, 256, id="r1-tp8-prefill2048"),
    gpu_param(1, 128, 8, 2048, 768, id="qwen3-30b-decode1"),
    gpu_param(256, 128, 8, 2048, 768, id="qwen3-30b-decode256"),
    gpu_param(4096, 128, 8, 2048, 768, id="qwen3-30b-prefill4096"),
])
def test_fused_moe_at_model_shapes(t, num_experts, k, hidden, inter):
    check(*moe_case(t, num_experts, k, hidden, inter, torch.bfloat16))


@pytest.mark.parametrize("t,num_experts,k,hidden,inter,block", [
    gpu_param(1, 256, 8, 7168, 2048, True, id="r1-block-decode1"),
    gpu_param(64, 256, 8, 7168, 2048, True, id="r1-block-decode64"),
    gpu_param(2048, 256, 8, 7168, 2048, True, id="r1-block-prefill2048"),
    gpu_param(16, 256, 8, 7168, 256, True, id="r1-tp8-block-decode16"),
    gpu_param(2048, 256, 8, 7168, 256, False, id="r1-tp8-channel-prefill2048"),
    gpu_param(1, 128, 8, 2048, 768, False, id="qwen3-30b-channel-decode1"),
    gpu_param(4096, 128, 8, 2048, 768, False, id="qwen3-30b-channel-prefill4096"),
])
def test_fp8_experts_at_model_shapes(t, num_experts, k, hidden, inter, block):
    check_fp8(*moe_case(t, num_experts, k, hidden, inter, torch.bfloat16), block)


@pytest.mark.parametrize("t,inter", [
    gpu_param(64, 2048, id="r1-block-decode64"), gpu_param(2048, 2048, id="r1-block-prefill2048"),
    gpu_param(16, 256, id="r1-tp8-block-decode16")])
def test_each_block_fp8_gemm_alone_matches_its_reference(t, inter):
    """The two grouped GEMMs one at a time, each against the fp8 loop fed the kernel's own
    input, within bf16 noise: tighter than the end-to-end bound (above), where re-quantizing
    the second GEMM's input to e4m3 lets a one-ulp bf16 difference in the first's output move
    a code a whole e4m3 step."""
    from dataclasses import replace

    from atom.kernels.triton import fused_moe as fm

    x, w13, w2, weights, experts = moe_case(t, 256, 8, 7168, inter, torch.bfloat16)
    (c13, s13), (c2, s2) = quantize_experts(w13, True), quantize_experts(w2, True)
    k, pairs = experts.shape[1], experts.numel()
    cfg = fm.choose_config(pairs, 256)
    cfg = replace(cfg, block_k=fm.SCALE_BLOCK, block_n=min(cfg.block_n, fm.SCALE_BLOCK))
    blocks = moe_align.align(experts, 256, cfg.block_m)
    w = weights.float().contiguous().view(-1)
    h = x.new_empty(pairs, inter)
    fm._grouped_gemm(fm._activations(x, 2), fm.Operand(c13, s13), h, blocks, w, k, gated=True,
                     routed=False, cfg=cfg)
    y = x.new_zeros(pairs, x.shape[1])
    fm._grouped_gemm(fm._activations(h, 2), fm.Operand(c2, s2), y, blocks, w, 1, gated=False,
                     routed=True, cfg=cfg)

    def seen(a: torch.Tensor) -> torch.Tensor:
        q, sc = ref_quant(a, 128)
        return q.float() * sc.repeat_interleave(128, 1)[:, :a.shape[1]]
    flat = experts.flatten()
    h_ref, y_ref = torch.empty_like(h), torch.empty_like(y)
    for e in flat.unique().tolist():
        p = (flat == e).nonzero().squeeze(1)
        g = (seen(x[p // k]) @ dequantize_experts(c13[e], s13[e]).T).to(x.dtype)
        h_ref[p] = torch_ref.silu_and_mul(g)
        y_ref[p] = ((seen(h[p]) @ dequantize_experts(c2[e], s2[e]).T).to(x.dtype).float()
                    * w[p, None]).to(x.dtype)
    assert rel_err(h, h_ref) < 5e-3
    assert rel_err(y, y_ref) < 5e-3


@pytest.mark.parametrize("quant", [None, "block"], ids=["bf16", "fp8_block"])
@pytest.mark.parametrize("t", [1, 48])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_moe_forward_replays_in_a_cuda_graph_with_new_routings(t, quant):
    """Captured once, replayed with new tokens and a new routing: right for each, which a
    forward that sized anything from the routing on the host could not be. fp8 experts too:
    their activations' quantization is inside the graph."""
    from atom.kernels.triton_backend import TritonBackend

    be = TritonBackend()
    x, w13, w2, weights, experts = moe_case(t, 64, 8, 1024, 256, torch.bfloat16)
    scales: dict = {}
    if quant is not None:
        (w13, s13), (w2, s2) = quantize_experts(w13, True), quantize_experts(w2, True)
        scales = dict(w13_scale=s13, w2_scale=s2)
    be.fused_moe(x, w13, w2, weights, experts, **scales)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = be.fused_moe(x, w13, w2, weights, experts, **scales)
    for seed in (1, 2):
        nx, _, _, nw, ne = moe_case(t, 64, 8, 1024, 256, torch.bfloat16, seed=seed)
        x.copy_(nx)
        weights.copy_(nw)
        experts.copy_(ne)
        graph.replay()
        if quant is None:
            ref = torch_ref.fused_moe(x.float(), w13.float(), w2.float(), weights, experts)
        else:  # both sides quantize activations alike; 2e-2 as test_fp8_experts explains
            ref = torch_ref.fused_moe(x, w13, w2, weights, experts, s13, s2)
        assert rel_err(out, ref) < (tol(torch.bfloat16) if quant is None else 2e-2)


@pytest.mark.parametrize("arch", ["qwen3_moe", "glm4_moe", "minimax_m2"])
def test_moe_models_generate_on_the_triton_backend_what_torch_does(tmp_path, arch):
    """Every MoE family's experts reach the fused kernel through the backend (GLM-4.5 through
    DeepSeek-V3's MoE block, MiniMax-M2 through its own router): fp32 on the CPU
    (interpreted) gives the torch backend's greedy tokens."""
    if torch.cuda.is_available():
        pytest.skip("bf16 on the GPU: the kernel tests above check the shapes there")
    from atom.sampling_params import SamplingParams
    from tests.engine.checkpoints import local_engine, make_checkpoint

    path = make_checkpoint(arch, tmp_path)
    prompts = [[1, 2, 3, 4] * 5, [5, 6, 7], list(range(10, 50))]

    def greedy(kernels: str) -> list[list[int]]:
        eng = local_engine(path, f"runtime.kernels={kernels}", "kv_cache.num_blocks=64")
        outs = eng.generate(prompts, SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
        return [o["token_ids"] for o in outs]
    assert greedy("triton") == greedy("torch")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_qwen3_moe_decodes_in_cuda_graphs_as_it_does_eagerly(tmp_path):
    """The engine captures the MoE layers in its decode graphs (the per-expert loop's host
    sync made that impossible) and replaying them gives the eager forward's tokens."""
    import atom
    from atom.sampling_params import SamplingParams
    from tests.engine.checkpoints import make_checkpoint

    path = make_checkpoint("qwen3_moe", tmp_path)
    prompts = [[1, 2, 3, 4] * 5, [5, 6, 7], list(range(10, 50))]

    def greedy(*overrides: str) -> list[list[int]]:
        eng = atom.build_engine(atom.compose([
            "model=local", f"model.path={path}", "runtime.kernels=triton",
            "load.progress_bar=false", "kv_cache.num_blocks=64", *overrides]))
        outs = eng.generate(prompts, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
        return [o["token_ids"] for o in outs]
    assert greedy() == greedy("runtime.enforce_eager=true")
