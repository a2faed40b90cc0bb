"""TFLOP/s of Llama-3.1-8B's four GEMMs at the 8B throughput run's row counts: cuBLAS (torch's
default), cuBLASLt, and a persistent Triton GEMM (TMA descriptors, wgmma) by tile shape.

Why: in the 8B 1000 x 1k/1k run the GEMMs take ~45 s of ~104, and at the decode batch (~416
rows) qkv, o_proj and the split-K down_proj run at ~470-560 TFLOP/s against ~800 for large
shapes (run 15's trace): ~1.2 ms of a 25.7 ms step. This says whether another library or a tile
shape that fits 416 rows better (64-row tiles waste 7% on padding, 128-row ones 23%) is faster.
Each figure is a CUDA graph of one GEMM per layer over 8 layers' distinct weights (3.5 GB: past
L2), replayed. Run 23 (4e827b0, results/H200.md): at 416 rows cuBLASLt wins o_proj (582 vs 502)
and down (678 vs 633) and loses qkv (557 vs 598) and gate_up (592 vs 631); this persistent
Triton GEMM lost to cuBLAS at every shape.

    python benchmarks/gemm_shape_probe.py --out probe.json
    python benchmarks/gemm_shape_probe.py --table   # atom/kernels/triton/blas_tables/<GPU>.json
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from probe_kit import error_text, probe_meta, report

SHAPES = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096),
          "down": (4096, 14336)}  # (out features N, in features K)
ROWS = (208, 416, 832, 8192)
LAYERS = 8
# (BM, BN, BK, stages, warps)
TILES = [(64, 128, 64, 4, 4), (64, 256, 64, 3, 4), (128, 128, 64, 4, 8), (128, 256, 64, 3, 8),
         (128, 128, 128, 3, 8)]


@triton.jit
def _persistent_mm(a_desc, w_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, NUM_SMS: tl.constexpr):
    """C[M, N] = A[M, K] · W[N, K]ᵀ; one program per SM walks the output tiles, M fastest so
    the programs in flight share each weight tile (the weights are the big operand)."""
    num_m = tl.cdiv(M, BM)
    tiles = num_m * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True):
        off_m = (tile % num_m) * BM
        off_n = (tile // num_m) * BN
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            a = a_desc.load([off_m, k])
            w = w_desc.load([off_n, k])
            acc = tl.dot(a, w.T, acc)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def triton_mm(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, tile: tuple) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, stages, warps = tile
    m, k = a.shape
    n = w.shape[0]
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    _persistent_mm[(min(sms, tiles),)](
        TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
        TensorDescriptor.from_tensor(out, [bm, bn]), m, n, k, BM=bm, BN=bn, BK=bk,
        NUM_SMS=min(sms, tiles), num_stages=stages, num_warps=warps)
    return out


def _graph_tflops(run: Callable[[], None], flops: float) -> float:
    from triton.testing import do_bench

    run()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    ms = do_bench(g.replay, warmup=5, rep=40, return_mode="median")
    return round(flops / ms / 1e9, 1)


# The linears of the models the H200 benchmarks run, (N, K): Llama-3.1-8B and Qwen3-0.6B, with
# their vocabulary projections (only ever up to max_num_seqs rows: prefill keeps last tokens).
TABLE_SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (4096, 1024),
                (1024, 2048), (6144, 1024), (1024, 3072)]
VOCAB_SHAPES = [(128256, 4096), (151936, 1024)]
TABLE_ROWS = (16, 64, 128, 256, 416, 512, 1024, 2048, 4096, 8192, 16384)
LT_MARGIN = 1.03  # cuBLASLt only where it is at least 3% faster: no flips on noise


def write_table(path: Optional[str]) -> dict[str, Any]:
    """For each shape and row count, the faster library (cuBLAS unless cuBLASLt wins by
    LT_MARGIN), merged into row ranges: blas_table.py's table for this GPU."""
    from atom.kernels.triton.blas_table import parse_table, table_path

    gpu = torch.cuda.get_device_name(0)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    shapes, measured = {}, {}
    for n, k in TABLE_SHAPES + VOCAB_SHAPES:
        ws = [torch.randn(n, k, **bf) * 0.02 for _ in range(4)]  # 4 layers: past L2 at every shape
        ranges: list[list] = []
        for m in TABLE_ROWS if n < 100_000 else [r for r in TABLE_ROWS if r <= 512]:
            a, out = torch.randn(m, k, **bf), torch.empty(m, n, **bf)
            rate = {}
            for lib in ("cublas", "cublaslt"):
                torch.backends.cuda.preferred_blas_library(lib)
                rate[lib] = _graph_tflops(lambda: [torch.matmul(a, w.t(), out=out) for w in ws],
                                          2.0 * m * n * k * len(ws))
            torch.backends.cuda.preferred_blas_library("cublas")
            lib = "cublaslt" if rate["cublaslt"] >= LT_MARGIN * rate["cublas"] else "cublas"
            measured[f"{n}x{k}_m{m}"] = rate
            if ranges and ranges[-1][1] == lib:
                ranges[-1][0] = m
            else:
                ranges.append([m, lib])
        shapes[f"{n}x{k}"] = ranges
        print(f"{n}x{k}", ranges, flush=True)
        del ws
        torch.cuda.empty_cache()
    table = {"gpu": gpu, "commit": os.environ.get("ATOM_COMMIT", "unknown"),
             "command": "python benchmarks/gemm_shape_probe.py --table",
             "torch": torch.__version__, "shapes": shapes, "tflops": measured}
    parse_table(table, "the new table")  # what blas_table.py will read must parse
    dest = Path(path) if path else table_path(gpu)
    dest.parent.mkdir(parents=True, exist_ok=True)  # git does not carry an empty blas_tables/
    with open(dest, "w") as f:
        json.dump(table, f, indent=1)
    print(f"== gemm_shape_probe table: {dest} {json.dumps(shapes)}", flush=True)
    return table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", nargs="?", const="", default=None,
                    help="write this GPU's BLAS table (to the given path, or where atom reads it)")
    args = ap.parse_args()
    if args.table is not None:
        write_table(args.table or None)
        return
    res = probe_meta(layers=LAYERS)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    for name, (n, k) in SHAPES.items():
        ws = [torch.randn(n, k, **bf) * 0.02 for _ in range(LAYERS)]
        for m in ROWS:
            a = torch.randn(m, k, **bf)
            out = torch.empty(m, n, **bf)
            flops = 2.0 * m * n * k * LAYERS
            key = f"{name}_m{m}"
            for lib in ("cublas", "cublaslt"):
                torch.backends.cuda.preferred_blas_library(lib)
                try:
                    res[f"{key}_{lib}"] = _graph_tflops(
                        lambda: [torch.matmul(a, w.t(), out=out) for w in ws], flops)
                except Exception as e:
                    res[f"{key}_{lib}"] = error_text(e, 120)
            torch.backends.cuda.preferred_blas_library("cublas")
            ref = F.linear(a, ws[0]).float()
            for tile in TILES:
                tkey = f"{key}_triton_" + "_".join(map(str, tile))
                try:
                    err = (triton_mm(a, ws[0], out, tile).float() - ref).norm() / ref.norm()
                    res[f"{tkey}_rel_err"] = round(err.item(), 5)
                    res[tkey] = _graph_tflops(
                        lambda: [triton_mm(a, w, out, tile) for w in ws], flops)
                except Exception as e:
                    res[tkey] = error_text(e, 120)
            print(key, {kk: v for kk, v in res.items() if kk.startswith(key)
                        and not kk.endswith("rel_err")}, flush=True)
        del ws
        torch.cuda.empty_cache()
    report("gemm_shape_probe", res, args.out)


if __name__ == "__main__":
    main()
