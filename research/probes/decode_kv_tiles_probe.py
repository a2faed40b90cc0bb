"""Does a decode program over several kv heads read the paged KV cache faster than one per head?

Why: at the 8B fp8 run's operating point (512 sequences, ~1k context) decode attention over the
fp8 KV is 13.5 of a 22.5 ms step and reads ~2.7 TB/s, where bf16 reads ~4.2 (results/H200.md,
runs 62 and 70). The paged gather alone moves the same rows per second in fp8 as in bf16
(decode_attention_probe.py, run 20), so per token a program pays a fixed cost that fp8's 128-byte
rows cannot spread. With KVP kv heads a program (block-diagonal queries: each row's query sits
in its own head's columns), a token's row is KVP x 128 bytes, contiguous in atom's
[blocks, page, kv heads, dim] cache, and GQA-4's 4 query heads a kv head fill the dots' 16 rows
instead of padding them. This times atom's kernel at KVP = 1, 2, 4 over tiles, warps and
stages, for both cache dtypes, as TB/s of K and V read, and checks each output against KVP = 1.

    python research/probes/decode_kv_tiles_probe.py --out probe.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from triton.testing import do_bench

from atom.kernels.triton.paged_decode_attention import decode_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import decode_case, error_text, probe_meta, report

SHAPES = ((512, 1024), (416, 1536), (64, 4096))
# (kvp, block_n, num_warps, num_stages); None = the kernel's defaults
CONFIGS = ([(1, None, 4, None)]
           + [(2, bn, w, st) for bn in (64, 128) for w in (4, 8) for st in (2, 3)]
           + [(4, bn, w, st) for bn in (32, 64) for w in (4, 8) for st in (2, 3)])


def _case_results(batch: int, ctx: int, kv_dtype: torch.dtype) -> dict[str, Any]:
    case = decode_case(batch, ctx, kv_dtype=kv_dtype)
    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    kv_bytes = 2 * kc.numel() * kc.element_size()
    scale = q.shape[-1] ** -0.5
    ref = decode_attention(q, kc, vc, meta, scale)
    res: dict[str, Any] = {}
    for kvp, bn, w, st in CONFIGS:
        key = f"kvp{kvp}_n{bn or 'def'}_w{w}_st{st or 'def'}"
        out = torch.empty_like(q)
        try:
            def run() -> None:
                decode_attention(q, kc, vc, meta, scale, block_n=bn, num_warps=w,
                                 num_stages=st, out=out, kv_heads_per_program=kvp)
            run()
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                run()
            ms = do_bench(g.replay, warmup=5, rep=40, return_mode="median")
            res[key] = {"tb_s": round(kv_bytes / ms / 1e9, 2), "rel_err": float(f"{err:.2e}")}
        except Exception as e:  # a config that does not compile is a result too
            res[key] = error_text(e, 120)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--dtypes", default="fp8,bf16")
    args = ap.parse_args()
    dtypes = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}
    results: dict[str, Any] = probe_meta(configs=[list(c) for c in CONFIGS])
    for name in args.dtypes.split(","):
        for batch, ctx in SHAPES:
            results[f"{name}_b{batch}_c{ctx}"] = _case_results(batch, ctx, dtypes[name])
            torch.cuda.empty_cache()
    report("decode_kv_tiles", results, args.out)


if __name__ == "__main__":
    main()
