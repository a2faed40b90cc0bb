"""gpu_bench `fused_moe`: one MoE layer's routed experts through the fused Triton kernel and
through per-expert torch matmuls over the same routed tokens (the routing worked out beforehand,
outside the timing), at R1's shapes (full and the tp8 slice) and Qwen3-30B-A3B's.

Both run as CUDA-graph replays, launch overhead out. At decode sizes one graph holds several
calls on different routings, so the experts they hit together exceed the 60 MB L2 and every
call reads its weights from HBM, as a model's layers do. Reported: µs, TFLOP/s of the same
6·T·k·H·I FLOPs, and at decode sizes the expert weight bytes read per second (only the experts
hit are read) against the copy bandwidth.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

COPY_BW = 4.18e12  # bytes/s, as gpu_bench.COPY_BW
SHAPES = {"r1": (256, 8, 7168, 2048), "r1_tp8": (256, 8, 7168, 256),
          "qwen3_30b": (128, 8, 2048, 768)}  # (experts, k, hidden, intermediate)
TOKENS = (1, 16, 64, 256, 2048, 8192)
DECODE_MAX = 256  # the sizes timed over several routings and reported in bytes/s too


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


def _routing(t: int, num_experts: int, k: int, hidden: int, seed: int):
    from atom.layers.moe import softmax_topk

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, hidden, generator=g, device="cuda").to(torch.bfloat16)
    logits = torch.randn(t, num_experts, generator=g, device="cuda")
    weights, experts = softmax_topk(logits, k, renormalize=True)
    return x, weights, experts


def _per_expert_torch(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                      weights: torch.Tensor, experts: torch.Tensor) -> Callable[[], Any]:
    """The baseline: for each expert hit, its tokens' gate_up matmul, SiLU-and-mul, down matmul,
    router weight and scatter-add, with the token lists built here on the host, not timed."""
    from atom.kernels.triton.activation import silu_and_mul

    k = experts.shape[1]
    flat = experts.flatten()
    order = flat.argsort()
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()
    plan, start = [], 0
    for e, c in enumerate(counts):
        if c:
            sel = order[start:start + c]
            plan.append((e, sel // k, weights.flatten()[sel].unsqueeze(-1)))
        start += c

    def run() -> torch.Tensor:
        out = torch.zeros_like(x, dtype=torch.float32)
        for e, idx, w in plan:
            y = F.linear(silu_and_mul(F.linear(x[idx], w13[e])), w2[e])
            out.index_add_(0, idx, y.float() * w)
        return out.to(x.dtype)
    return run


def _case(t: int, w13: torch.Tensor, w2: torch.Tensor, k: int) -> dict[str, Any]:
    from atom.kernels.triton.fused_moe import fused_moe

    num_experts, hidden, inter = w13.shape[0], w13.shape[2], w2.shape[2]
    sets = [_routing(t, num_experts, k, hidden, s) for s in range(4 if t <= DECODE_MAX else 1)]
    flops = 6 * t * k * hidden * inter
    fused = _replay_us([lambda s=s: fused_moe(s[0], w13, w2, s[1], s[2]) for s in sets])
    torch_us = _replay_us([_per_expert_torch(*s[:1], w13, w2, *s[1:]) for s in sets])
    row = {"fused_us": round(fused, 1), "torch_us": round(torch_us, 1),
           "fused_TFLOPs": round(flops / fused / 1e6, 2),
           "torch_TFLOPs": round(flops / torch_us / 1e6, 2),
           "speedup": round(torch_us / fused, 2)}
    if t <= DECODE_MAX:
        hit = sum(s[2].unique().numel() for s in sets) / len(sets)
        byts = hit * 3 * hidden * inter * w13.element_size()
        row |= {"experts_hit": hit, "fused_TBps": round(byts / fused / 1e6, 3),
                "fused_of_copy_bw": round(byts / fused / 1e6 / (COPY_BW / 1e12), 3),
                "torch_TBps": round(byts / torch_us / 1e6, 3)}
    return row


def bench_fused_moe() -> dict[str, Any]:
    """bf16 experts (fp8 experts are not implemented yet)."""
    out: dict[str, Any] = {}
    for name, (num_experts, k, hidden, inter) in SHAPES.items():
        w13 = torch.randn(num_experts, 2 * inter, hidden, device="cuda",
                          dtype=torch.bfloat16).mul_(hidden ** -0.5)  # R1's: 15 GB
        w2 = torch.randn(num_experts, hidden, inter, device="cuda",
                         dtype=torch.bfloat16).mul_(inter ** -0.5)
        for t in TOKENS:
            out[f"{name}_t{t}"] = _case(t, w13, w2, k)
            print(f"fused_moe {name} T={t}: {out[f'{name}_t{t}']}", flush=True)
        del w13, w2
        torch.cuda.empty_cache()
    return out
