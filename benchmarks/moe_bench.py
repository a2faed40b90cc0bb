"""gpu_bench `fused_moe`: one MoE layer's routed experts through the fused Triton kernel and
through per-expert torch matmuls over the same routed tokens (the routing worked out beforehand,
outside the timing), at R1's shapes (full and the tp8 slice) and Qwen3-30B-A3B's; bf16 experts,
and fp8 experts with per-channel and 128 × 128 block scales.

The torch baselines: F.linear (cuBLAS) for bf16; for fp8, each expert's rows quantized per token
(fp8_quant) into torch._scaled_mm with row-wise scales, the same FLOPs on the fp8 tensor cores
(torch has no 128 × 128 block-scaled GEMM, so both fp8 rows share that baseline).

Both run as CUDA-graph replays, launch overhead out. At decode sizes one graph holds several
calls on different routings, so the experts they hit together exceed the 60 MB L2 and every
call reads its weights from HBM, as a model's layers do. Reported: µs, TFLOP/s of the same
6·T·k·H·I FLOPs, and at decode sizes the expert weight bytes read per second (only the experts
hit are read) against the copy bandwidth.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

COPY_BW = 4.18e12  # bytes/s, as gpu_bench.COPY_BW
SHAPES = {"r1": (256, 8, 7168, 2048), "r1_tp8": (256, 8, 7168, 256),
          "qwen3_30b": (128, 8, 2048, 768)}  # (experts, k, hidden, intermediate)
TOKENS = (1, 16, 64, 256, 2048, 8192)
DECODE_MAX = 256  # the sizes timed over several routings and reported in bytes/s too

# (w13, w13 scale, w2, w2 scale): bf16 experts have no scales.
Experts = tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor, Optional[torch.Tensor]]


def _replay_us(calls: list[Callable[[], Any]]) -> float:
    """µs per call: the calls captured in one graph, timed by replay."""
    from triton.testing import do_bench

    for c in calls:
        c()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    return do_bench(g.replay, warmup=10, rep=50, return_mode="median") * 1e3 / len(calls)


def _routing(t: int, num_experts: int, k: int, hidden: int, seed: int, device: str = "cuda"):
    from atom.layers.moe import softmax_topk

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(t, hidden, generator=g, device=device).to(torch.bfloat16)
    logits = torch.randn(t, num_experts, generator=g, device=device)
    weights, experts = softmax_topk(logits, k, renormalize=True)
    return x, weights, experts


def _plan(weights: torch.Tensor, experts: torch.Tensor, num_experts: int) -> list[tuple]:
    """(expert, its token rows, their router weights) for each expert hit, built on the host."""
    k = experts.shape[1]
    flat = experts.flatten()
    order = flat.argsort()
    counts = torch.bincount(flat, minlength=num_experts).tolist()
    plan, start = [], 0
    for e, c in enumerate(counts):
        if c:
            sel = order[start:start + c]
            plan.append((e, sel // k, weights.flatten()[sel].unsqueeze(-1)))
        start += c
    return plan


def _scaled_mm(a: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """a [M, K] bf16 @ (w [N, K] e4m3 · w_scale [N]).T: a quantized per token, row-wise scales."""
    from atom.kernels.triton.fp8_quant import quant_per_token

    q, s = quant_per_token(a)
    return torch._scaled_mm(q, w.t(), scale_a=s, scale_b=w_scale.view(1, -1),
                            out_dtype=torch.bfloat16)


def _per_expert_torch(x: torch.Tensor, experts_w: Experts, weights: torch.Tensor,
                      experts: torch.Tensor) -> Callable[[], Any]:
    """The baseline: for each expert hit, its tokens' gate_up matmul, SiLU-and-mul, down matmul,
    router weight and scatter-add (the token lists built beforehand, not timed)."""
    from atom.kernels.triton.activation import silu_and_mul

    w13, s13, w2, s2 = experts_w
    plan = _plan(weights, experts, w13.shape[0])

    def mm(a: torch.Tensor, w: torch.Tensor, s: Optional[torch.Tensor], e: int) -> torch.Tensor:
        return F.linear(a, w[e]) if s is None else _scaled_mm(a, w[e], s[e])

    def run() -> torch.Tensor:
        out = torch.zeros_like(x, dtype=torch.float32)
        for e, idx, w in plan:
            y = mm(silu_and_mul(mm(x[idx], w13, s13, e)), w2, s2, e)
            out.index_add_(0, idx, y.float() * w)
        return out.to(x.dtype)
    return run


def _fused(x: torch.Tensor, experts_w: Experts, weights: torch.Tensor,
           experts: torch.Tensor) -> Callable[[], Any]:
    from atom.kernels.triton.fused_moe import fused_moe

    w13, s13, w2, s2 = experts_w
    return lambda: fused_moe(x, w13, w2, weights, experts, w13_scale=s13, w2_scale=s2)


def _sets(t: int, k: int, experts_w: Experts) -> list[tuple]:
    """The routings a case is timed on (seeded: the fused and the torch run see the same)."""
    num_experts, hidden = experts_w[0].shape[0], experts_w[0].shape[2]
    return [_routing(t, num_experts, k, hidden, s) for s in range(4 if t <= DECODE_MAX else 1)]


def _torch_us(t: int, k: int, baseline: Experts) -> dict[str, Any]:
    try:
        return {"torch_us": _replay_us([_per_expert_torch(s[0], baseline, *s[1:])
                                        for s in _sets(t, k, baseline)])}
    except RuntimeError as e:  # a baseline torch cannot run here costs only its own rows
        return {"torch_error": str(e)[:200]}


def _align_us(sets: list[tuple], num_experts: int) -> float:
    """The expert sort's launches alone: a fixed cost inside every MoE layer."""
    from atom.kernels.triton import fused_moe, moe_align

    bm = fused_moe.choose_config(sets[0][2].numel(), num_experts).block_m
    return _replay_us([lambda s=s: moe_align.align(s[2], num_experts, bm) for s in sets])


def _rel_diff(t: int, k: int, experts_w: Experts, baseline: Experts) -> float:
    """‖fused − torch‖ / ‖torch‖ on the first routing: both did the same work (fp8 block
    against the per-channel baseline differs by the two quantizations, a few %)."""
    x, weights, experts = _sets(t, k, experts_w)[0]
    a = _fused(x, experts_w, weights, experts)().float()
    b = _per_expert_torch(x, baseline, weights, experts)().float()
    return round(((a - b).norm() / b.norm()).item(), 4)


def _case(t: int, k: int, experts_w: Experts, torch_row: dict[str, Any]) -> dict[str, Any]:
    """experts_w through the fused kernel, beside the torch baseline's time for the same work."""
    w13, _, w2, _ = experts_w
    num_experts, hidden, inter = w13.shape[0], w13.shape[2], w2.shape[2]
    sets = _sets(t, k, experts_w)
    flops = 6 * t * k * hidden * inter
    fused = _replay_us([_fused(s[0], experts_w, *s[1:]) for s in sets])
    row: dict[str, Any] = {"fused_us": round(fused, 1),
                           "fused_TFLOPs": round(flops / fused / 1e6, 2), **torch_row}
    if "torch_us" in torch_row:
        row |= {"torch_us": round(torch_row["torch_us"], 1),
                "torch_TFLOPs": round(flops / torch_row["torch_us"] / 1e6, 2),
                "speedup": round(torch_row["torch_us"] / fused, 2)}
    row["align_us"] = round(_align_us(sets, num_experts), 1)
    if t <= DECODE_MAX:
        hit = sum(s[2].unique().numel() for s in sets) / len(sets)
        byts = hit * 3 * hidden * inter * w13.element_size()
        row |= {"experts_hit": hit, "fused_TBps": round(byts / fused / 1e6, 3),
                "fused_of_copy_bw": round(byts / fused / 1e6 / (COPY_BW / 1e12), 3)}
    return row


def bench_fused_moe() -> dict[str, Any]:
    from atom.kernels.expert_quant import quantize_experts

    out: dict[str, Any] = {}
    for name, (num_experts, k, hidden, inter) in SHAPES.items():
        w13 = torch.randn(num_experts, 2 * inter, hidden, device="cuda",
                          dtype=torch.bfloat16).mul_(hidden ** -0.5)  # R1's: 15 GB
        w2 = torch.randn(num_experts, hidden, inter, device="cuda",
                         dtype=torch.bfloat16).mul_(inter ** -0.5)
        bf16: Experts = (w13, None, w2, None)
        channel: Experts = (*quantize_experts(w13, False), *quantize_experts(w2, False))
        block: Experts = (*quantize_experts(w13, True), *quantize_experts(w2, True))
        for t in TOKENS:
            baselines = {"bf16": _torch_us(t, k, bf16), "fp8": _torch_us(t, k, channel)}
            for tag, experts_w, base in (("bf16", bf16, "bf16"), ("fp8_channel", channel, "fp8"),
                                         ("fp8_block", block, "fp8")):
                key = f"{name}_{tag}_t{t}"
                out[key] = _case(t, k, experts_w, baselines[base])
                if "torch_us" in baselines[base]:
                    out[key]["rel_diff"] = _rel_diff(t, k, experts_w,
                                                     bf16 if base == "bf16" else channel)
                print(f"fused_moe {key}: {out[key]}", flush=True)
        del w13, w2, bf16, channel, block
        torch.cuda.empty_cache()
    return out
