"""Llama-3.1-8B's MLP at one row with fp8 weights, 32 layers' distinct weights in one CUDA graph
(more than L2 holds), as atom's decode step runs it, with its parts taken away one at a time:
where the W8A8 GEMV's (fp8_mma_gemv.py) gain is spent.

Why: on the H200 the W8A8 GEMV took one layer's four projections from 73.8 to 62.4 µs in a
chain (H200.md run 114), 0.36 ms over 32 layers, but the decode step gained 0.05 ms (run 116).
Arms, µs a layer:
  `plain`: stream_read of gate_up's and down's bytes, in turn (the floor);
  `off`: rms_norm, fp8_gemv gate_up, silu_and_mul, fp8_gemv down (the weight-only path);
  `on`: rms_norm_quant, mma_gemv gate_up, silu_mul_quant, mma_gemv down (4 K slices);
  `on_no_silu`: `on` without silu_mul_quant (down's x quantised ahead);
  `on_bare`: the two mma_gemv alone;
  `down_s{S}_st{T}`: `on_bare` with down in S slices at T pipeline stages;
  `gate_up_k{K}_st{T}`: gate_up's mma_gemv alone at BLOCK_K K and T stages.

    python research/probes/fp8_mlp_chain.py --out chain.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

H, I, LAYERS = 4096, 14336, 32


def _graph_us(body: Callable[[int], None]) -> float:
    """µs a layer of body(layer) for every layer, captured once and replayed."""
    from triton.testing import do_bench

    for layer in range(2):
        body(layer)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for layer in range(LAYERS):
            body(layer)
    return round(do_bench(g.replay, warmup=25, rep=200, return_mode="median") * 1e3 / LAYERS, 2)


def main() -> None:
    from stream_read import reader
    from atom.kernels.triton import fp8_mma_gemv as mma
    from atom.kernels.triton.activation import silu_and_mul
    from atom.kernels.triton.fp8_gemv import fp8_gemv
    from atom.kernels.triton.fp8_quant import rms_norm_quant, silu_mul_quant
    from atom.kernels.triton.rms_norm import fused_add_rms_norm

    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    dev = "cuda"

    def fp8(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(n, k, device=dev).to(torch.float8_e4m3fn),
                torch.rand(n, device=dev) / 448 + 1e-4)

    gate_up = [fp8(2 * I, H) for _ in range(LAYERS)]
    down = [fp8(H, I) for _ in range(LAYERS)]
    norm_w = torch.ones(H, device=dev, dtype=torch.bfloat16)
    x = torch.randn(1, H, device=dev, dtype=torch.bfloat16)
    res = torch.randn(1, H, device=dev, dtype=torch.bfloat16)
    xq_h, xs_h, _ = rms_norm_quant(x, res, norm_w, 1e-5, group=None)
    act = torch.randn(1, 2 * I, device=dev, dtype=torch.bfloat16)
    xq_i, xs_i = silu_mul_quant(act)
    counters = torch.zeros(H // mma.BLOCK_N + 1, dtype=torch.int32, device=dev)
    reads = [(reader(gate_up[i][0]), reader(down[i][0])) for i in range(LAYERS)]

    def plain(i: int) -> None:
        reads[i][0]()
        reads[i][1]()

    def off(i: int) -> None:
        h, _ = fused_add_rms_norm(x, res, norm_w, 1e-5)
        a = fp8_gemv(h, *gate_up[i])
        fp8_gemv(silu_and_mul(a), *down[i])

    def on(i: int, silu: bool = True, norm: bool = True, slices: int | None = None) -> None:
        xq, xs = (rms_norm_quant(x, res, norm_w, 1e-5, group=None)[:2] if norm
                  else (xq_h, xs_h))
        a = mma.mma_gemv(xq, xs, *gate_up[i])
        xq2, xs2 = silu_mul_quant(a) if silu else (xq_i, xs_i)
        mma.mma_gemv(xq2, xs2, *down[i], counters=counters, n_slices=slices)

    out = {"plain": _graph_us(plain), "off": _graph_us(off), "on": _graph_us(on),
           "on_no_silu": _graph_us(lambda i: on(i, silu=False)),
           "on_bare": _graph_us(lambda i: on(i, silu=False, norm=False))}
    stages = mma.NUM_STAGES
    for s in (2, 4, 8):
        for st in (3, 4):
            mma.NUM_STAGES = st
            out[f"down_s{s}_st{st}"] = _graph_us(lambda i: on(i, False, False, s))
    block_k = mma.BLOCK_K
    for bk, st in ((256, 4), (128, 4), (128, 6), (256, 3), (256, 5), (512, 2), (512, 3)):
        mma.BLOCK_K, mma.NUM_STAGES = bk, st
        out[f"gate_up_k{bk}_st{st}"] = _graph_us(lambda i: mma.mma_gemv(xq_h, xs_h, *gate_up[i]))
    mma.NUM_STAGES, mma.BLOCK_K = stages, block_k
    out["plain_again"], out["off_again"], out["on_again"] = (
        _graph_us(plain), _graph_us(off), _graph_us(on))
    print(json.dumps(out))
    if args.out:
        Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
