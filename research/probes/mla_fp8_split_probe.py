"""MLA decode over an fp8 latent cache at 16 heads (R1 at tp8): the kernel's default (both dots'
operands converted in registers from e4m3 pairs, unpipelined) against `fp8_split` (the scores'
operand from plain e4m3 loads that the pipeliner stages through shared memory, the values'
from the pairs; the same bytes read from L2 twice, from HBM once) over stages, warps and tiles.
Prints TB/s of latent read against the 4.18 TB/s copy, and the split path's largest
difference from the default's output.

    python research/probes/mla_fp8_split_probe.py [--out FILE]
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
# (block_n, warps, stages)
SPLIT_TILES = ((64, 4, 1), (64, 4, 2), (64, 4, 3), (64, 8, 2), (32, 4, 2), (32, 4, 3),
               (128, 8, 2), (128, 4, 2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out: dict[str, dict] = {}
    for batch, ctx in ((64, 4096), (128, 1024), (128, 4096), (256, 4096)):
        q, cache, meta, byts = _mla_decode_case(batch, ctx, 16, torch.float8_e4m3fn)
        ref = mla_decode_attention(q, cache, meta, R1_LATENT[0], 192 ** -0.5)
        row: dict[str, float | str] = {}
        res = torch.empty_like(ref)

        def tbps(**kw) -> float | str:
            try:
                ms = _graph_ms(lambda: mla_decode_attention(q, cache, meta, R1_LATENT[0],
                                                            192 ** -0.5, out=res, **kw))
            except Exception as e:  # registers, shared memory
                return type(e).__name__
            return round(byts / (ms * 1e-3) / 1e12, 3)

        row["default"] = tbps()
        for bn, w, st in SPLIT_TILES:
            kw = dict(block_n=bn, num_warps=w, num_stages=st)
            row[f"pairs_n{bn}_w{w}_st{st}"] = tbps(**kw)
            row[f"split_n{bn}_w{w}_st{st}"] = tbps(fp8_split=True, **kw)
        diff = (mla_decode_attention(q, cache, meta, R1_LATENT[0], 192 ** -0.5, fp8_split=True)
                .float() - ref.float()).abs().max().item()
        row["split_max_abs_diff"] = diff
        best = max((v, k) for k, v in row.items()
                   if isinstance(v, float) and k != "split_max_abs_diff")
        key = f"h16_fp8_b{batch}_ctx{ctx}"
        print(f"{key}: default {row['default']} TB/s, best {best[1]} {best[0]} "
              f"({best[0] / COPY_TBPS:.0%} of copy), split vs default max |diff| {diff:.2e}",
              flush=True)
        out[key] = row
        del q, cache
        torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
