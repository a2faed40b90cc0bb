"""Decode attention over fp8 caches at the points issues 19 and 21 judge, at the kernels'
default tiles: TB/s of cache read by the GQA kernel (the 8B's heads at its throughput run's
operating points) and the MLA kernel (R1's latent at 16 heads a rank), replayed from CUDA graphs.

Why: an A/B of a change to the fp8 kernels (run it from each tree: the `atom` on the import
path is the one measured, and it prints which), where gpu_bench's sweeps would spend minutes on
bf16 tiles the change does not touch.

    python research/probes/fp8_attention_ab.py [--sweep] [--bf16] [--out FILE]

`--bf16` adds the same points over bf16 caches: a change to a loop both dtypes share must not
cost the bf16 kernels.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case  # noqa: E402
from probe_kit import decode_case  # noqa: E402

import atom  # noqa: E402
from atom.kernels.triton.mla_decode import mla_decode_attention  # noqa: E402
from atom.kernels.triton.paged_decode_attention import decode_attention  # noqa: E402

COPY_TBPS = 4.18


def gqa(batch: int, ctx: int, tile: tuple[int, int, int] | None = None,
        kv_dtype: torch.dtype = torch.float8_e4m3fn) -> float | str:
    """TB/s at the defaults, or at `tile` (block_n, num_warps, num_stages)."""
    case = decode_case(batch, ctx, kv_dtype=kv_dtype)
    out = torch.empty_like(case.q)
    kw = {} if tile is None else dict(zip(("block_n", "num_warps", "num_stages"), tile))
    try:
        ms = _graph_ms(lambda: decode_attention(case.q, case.kc, case.vc, case.meta,
                                                128 ** -0.5, out=out, **kw))
    except Exception as e:  # a tile that does not compile (registers, shared memory)
        return type(e).__name__
    return round(2 * case.kc.numel() * case.kc.element_size() / (ms * 1e-3) / 1e12, 3)


def mla(batch: int, ctx: int, kv_dtype: torch.dtype = torch.float8_e4m3fn) -> float:
    q, cache, meta, byts = _mla_decode_case(batch, ctx, 16, kv_dtype)
    res = torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
    ms = _graph_ms(lambda: mla_decode_attention(q, cache, meta, R1_LATENT[0], 192 ** -0.5, 1.0,
                                                out=res))
    return round(byts / (ms * 1e-3) / 1e12, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--sweep", action="store_true",
                    help="also the GQA kernel's fp8 tiles (block_n x warps x stages)")
    ap.add_argument("--bf16", action="store_true", help="also the same points over bf16 caches")
    a = ap.parse_args()
    print("atom from", Path(atom.__file__).parent)
    res: dict[str, float | str] = {}
    if a.sweep:
        for b, c in ((512, 1024), (416, 1536)):
            for tile in ((bn, w, st) for bn in (64, 128) for w in (4, 8) for st in (2, 3, 4)):
                res[f"gqa_fp8_b{b}_ctx{c}_n{tile[0]}_w{tile[1]}_st{tile[2]}"] = gqa(b, c, tile)
                torch.cuda.empty_cache()
    dtypes = {"fp8": torch.float8_e4m3fn} | ({"bf16": torch.bfloat16} if a.bf16 else {})
    for tag, kvd in dtypes.items():
        for b, c in ((416, 1536), (512, 1024), (256, 2048)):
            res[f"gqa_{tag}_b{b}_ctx{c}"] = gqa(b, c, kv_dtype=kvd)
            torch.cuda.empty_cache()
        for b, c in ((64, 1024), (64, 4096), (128, 1024), (128, 4096), (256, 4096), (256, 8192)):
            res[f"mla16_{tag}_b{b}_ctx{c}"] = mla(b, c, kvd)
            torch.cuda.empty_cache()
    for k, v in res.items():
        print(f"{k}: {v} TB/s" + (f" ({v / COPY_TBPS:.0%} of copy)" if isinstance(v, float)
                                  else ""), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
