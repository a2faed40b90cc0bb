"""Does loading the next tile before this tile's dots speed up decode attention over an fp8 KV
cache: V in the GQA kernel, the latents in MLA's?

Why: the fp8 path converts V from e4m3 pairs in registers (atom/kernels/triton/e4m3.py), so its
V loads are register loads, which Triton's software pipeliner does not stage the way it stages
the cp.async loads that feed a dot from shared memory (K, and V in bf16): each tile's V waits
for memory in the loop. `prefetch_v` issues the next tile's V load before this tile's work. The
8B fp8 1000 × 1k/1k step spends 13.5 of 22.5 ms in this kernel at 62% of copy (H200.md run 62),
which decides issue 19's 18k tok/s; MLA's fp8 latents at 16 heads (tp8) read at 25-33% of copy
(runs 62, 65) with its loads unpipelined for the same reason. TB/s of cache read, each
configuration beside the default in the same process, at the serving shapes (Llama-3.1-8B
heads, 16-token pages shuffled; R1's latents at 16 heads, as mla_decode_tiles.py).

    python research/probes/decode_prefetch.py --out probe.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import DecodeCase, decode_case, error_text, median_ms, probe_meta, report

SHAPES = ((512, 1536), (416, 1536), (256, 1024), (64, 4096))
# (block_n, num_warps, num_stages, prefetch_v); None: the kernel's defaults
CONFIGS = {"fp8": [None, (128, 4, 1, False), (128, 4, 1, True), (128, 4, 3, True),
                   (64, 4, 1, True), (128, 8, 1, True), (64, 2, 1, True), (256, 8, 1, True)],
           "bf16": [None, (128, 4, 2, True), (64, 4, 2, True)]}
# MLA, fp8 latents at 16 heads: (block_n, num_warps, num_stages, prefetch); None: defaults
MLA_SHAPES = ((64, 4096), (128, 1024), (256, 4096))
MLA_CONFIGS = [None, (64, 4, 1, True), (32, 4, 1, True), (64, 8, 1, True), (128, 4, 1, True),
               (128, 8, 1, True), (64, 4, 2, True)]


def _row(case: DecodeCase, configs: list) -> dict[str, Any]:
    """Each configuration's TB/s and error against the default's output on one case."""
    from atom.kernels.triton.paged_decode_attention import decode_attention

    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    scale = q.shape[-1] ** -0.5
    ref = decode_attention(q, kc, vc, meta, scale).float()
    row: dict[str, Any] = {}
    for cfg in configs:
        kw = {} if cfg is None else dict(block_n=cfg[0], num_warps=cfg[1], num_stages=cfg[2],
                                         prefetch_v=cfg[3])
        key = "default" if cfg is None else "n{}_w{}_st{}_pf{}".format(*cfg)
        run = lambda: decode_attention(q, kc, vc, meta, scale, **kw)  # noqa: E731
        try:
            err = ((run().float() - ref).norm() / ref.norm()).item()
            ms = median_ms(run, reps=10, inner=5)
            row[key] = {"tb_s": round(case.kv_bytes / ms / 1e9, 3), "rel_err": round(err, 5)}
        except Exception as e:
            row[key] = {"error": error_text(e, 300)}
    return row


def _mla_row(batch: int, ctx: int) -> dict[str, Any]:
    """Each MLA configuration's TB/s and error against the defaults' output on one case."""
    from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case

    from atom.kernels.triton.mla_decode import mla_decode_attention

    q, cache, meta, byts = _mla_decode_case(batch, ctx, 16, torch.float8_e4m3fn)
    out = torch.empty(q.shape[0], q.shape[1], R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
    ref = mla_decode_attention(q, cache, meta, R1_LATENT[0], 192 ** -0.5).float()
    row: dict[str, Any] = {}
    for cfg in MLA_CONFIGS:
        kw = {} if cfg is None else dict(block_n=cfg[0], num_warps=cfg[1], num_stages=cfg[2],
                                         prefetch=cfg[3])
        key = "default" if cfg is None else "n{}_w{}_st{}_pf{}".format(*cfg)
        run = lambda: mla_decode_attention(q, cache, meta, R1_LATENT[0], 192 ** -0.5,  # noqa: E731
                                           out=out, **kw)
        try:
            err = ((run().float() - ref).norm() / ref.norm()).item()
            row[key] = {"tb_s": round(byts / _graph_ms(run) / 1e9, 3), "rel_err": round(err, 5)}
        except Exception as e:
            row[key] = {"error": error_text(e, 300)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res: dict[str, Any] = probe_meta()
    for dtag, dtype in (("fp8", torch.float8_e4m3fn), ("bf16", torch.bfloat16)):
        for batch, ctx in SHAPES:
            torch.manual_seed(0)
            case = decode_case(batch, ctx, kv_dtype=dtype)
            res[f"{dtag}_{batch}x{ctx}"] = row = _row(case, CONFIGS[dtag])
            print(f"{dtag} {batch}x{ctx}", row, flush=True)
            del case
            torch.cuda.empty_cache()
    for batch, ctx in MLA_SHAPES:
        res[f"mla_fp8_h16_{batch}x{ctx}"] = row = _mla_row(batch, ctx)
        print(f"mla fp8 h16 {batch}x{ctx}", row, flush=True)
        torch.cuda.empty_cache()
    report("decode_prefetch", res, args.out)


if __name__ == "__main__":
    main()
