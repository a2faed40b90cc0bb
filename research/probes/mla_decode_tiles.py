"""MLA decode attention: the tile and split choices around mla_decode.py's defaults, at the
shapes the R1 runs hit (16 heads a rank at tp8, 128 at tp1 / DP attention), against the
defaults in the same process.

Why: gpu_bench's mla_decode_sweep measured tiles at one split count (batch 128 × 4k, one
program per sequence at 16 heads: under one wave of 132 SMs) and split counts at one tile;
this crosses the two at batch 64–256 × 1k–8k, so tile_defaults and num_splits can be chosen
from one table. Prints TB/s of latent read (and its share of the 4.18 TB/s copy) per choice,
the defaults' first.

    python research/probes/mla_decode_tiles.py [--only h16_fp8,...] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case  # noqa: E402

from atom.kernels.triton.mla_decode import mla_decode_attention  # noqa: E402

COPY_TBPS = 4.18
# (heads per tile, block_n, warps, stages); None: the kernel's defaults.
TILES = {16: (None, (16, 64, 8, 2), (16, 64, 4, 2), (16, 128, 8, 2), (16, 64, 8, 3),
              (16, 64, 4, 3)),
         128: (None, (64, 64, 8, 2), (64, 64, 8, 1), (64, 128, 8, 2), (32, 64, 4, 2))}
# An fp8 cache: its own choices at 16 heads (its tiles are converted in registers).
FP8_TILES = {16: (None, (16, 128, 8, 1), (16, 128, 4, 1), (16, 32, 4, 1), (16, 64, 4, 1),
                  (16, 64, 4, 2), (16, 32, 4, 2), (16, 64, 8, 1), (16, 128, 8, 2)),
             128: (None, (64, 64, 8, 1), (64, 32, 8, 1), (32, 64, 8, 1))}
SPLITS = (None, 1, 2, 4, 8, 16)
POINTS = ((64, 4096), (128, 1024), (128, 4096), (256, 4096))


def _tbps(q, cache, meta, byts, tile, splits) -> float | str:
    res = torch.empty(q.shape[0], q.shape[1], R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
    kw = {} if tile is None else dict(zip(("heads_per_tile", "block_n", "num_warps",
                                           "num_stages"), tile))
    try:
        ms = _graph_ms(lambda: mla_decode_attention(q, cache, meta, R1_LATENT[0], 192 ** -0.5,
                                                    1.0, splits=splits, out=res, **kw))
    except Exception as e:  # a choice that does not compile (registers, shared memory)
        return type(e).__name__
    return round(byts / (ms * 1e-3) / 1e12, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="e.g. h16_fp8,h128_fp8")
    ap.add_argument("--points", default=None, help="batch x context, e.g. 64x1024,256x8192")
    args = ap.parse_args()
    points = POINTS if args.points is None else tuple(
        tuple(int(v) for v in p.split("x")) for p in args.points.split(","))
    out: dict[str, dict[str, float | str]] = {}
    only = set(args.only.split(",")) if args.only else None
    for heads in TILES:
        for kvd, tag in ((torch.bfloat16, "bf16"), (torch.float8_e4m3fn, "fp8")):
            if only is not None and f"h{heads}_{tag}" not in only:
                continue
            tiles = FP8_TILES[heads] if tag == "fp8" else TILES[heads]
            for batch, ctx in points:
                q, cache, meta, byts = _mla_decode_case(batch, ctx, heads, kvd)
                row: dict[str, float | str] = {}
                for tile in tiles:
                    for sp in SPLITS:
                        name = ("default" if tile is None else "t{}_n{}_w{}_st{}".format(*tile))
                        row[f"{name}_s{sp or 'auto'}"] = _tbps(q, cache, meta, byts, tile, sp)
                key = f"h{heads}_{tag}_b{batch}_ctx{ctx}"
                best = max((v, k) for k, v in row.items() if isinstance(v, float))
                print(f"{key}: default {row['default_sauto']} TB/s, best {best[1]} {best[0]} "
                      f"({best[0] / COPY_TBPS:.0%} of copy)", flush=True)
                out[key] = row
                del q, cache
                torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
