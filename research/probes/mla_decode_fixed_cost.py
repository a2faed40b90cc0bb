"""What a short MLA decode call's fixed cost is made of: the kernel, or one call in a graph of
its own.

Why: issue 21's benchmark times one MLA decode call replayed alone from a CUDA graph, and at
16 heads its times fit ~25–30 µs plus the bytes at ~4.1 TB/s (run 101: 256 × 1k, 302 MB, no
merge, 96 µs; 256 × 8k 598 µs), which is what holds 1k contexts at 37–75% of copy. In serving
the call is one of 61 layers in a step's graph, launched with PDL behind the kernel before it,
and that fixed cost may be the lone graph's, not the kernel's. Measured at each point, TB/s of
the bytes read:
  one      atom's call alone in a graph (as gpu_bench's mla_decode)
  layers   LAYERS calls, each over its own cache, in one graph: the time a call
  read     the same bytes read by benchmarks/stream_read.py's plain streaming kernel (the best
           of a few grids), alone in a graph: the limit a single launch of that size has
  read_l   LAYERS such reads in one graph
do_bench clears the L2 before each replay; LAYERS distinct caches keep the layers' reads from
hitting in it (the smallest point's 8 caches are 600 MB against a 60 MB L2).

    python research/probes/mla_decode_fixed_cost.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_bench import COPY_BW, R1_LATENT, _mla_decode_case  # noqa: E402
from moe_bench import _replay_us  # noqa: E402
from stream_read import reader  # noqa: E402

from atom.kernels.triton.mla_decode import mla_decode_attention  # noqa: E402

LAYERS = 8
POINTS = ((64, 1024), (128, 1024), (256, 1024), (64, 4096), (256, 4096), (256, 8192))


def _graph_ms(calls: list[Callable[[], Any]]) -> float:
    """ms of one replay of a graph holding every call in order."""
    return _replay_us(calls) * len(calls) / 1e3


def _tbps(byts: int, ms: float) -> float:
    return round(byts / (ms * 1e-3) / 1e12, 3)


def point(batch: int, ctx: int, kv_dtype: torch.dtype) -> dict[str, Any]:
    q, cache, meta, byts = _mla_decode_case(batch, ctx, 16, kv_dtype)
    caches = [cache] + [torch.empty_like(cache).copy_(cache) for _ in range(LAYERS - 1)]
    outs = [torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
            for _ in caches]
    calls = [lambda c=c, o=o: mla_decode_attention(q, c, meta, R1_LATENT[0], 192 ** -0.5, 1.0,
                                                   out=o) for c, o in zip(caches, outs)]
    res: dict[str, Any] = {"MB": round(byts / 1e6, 1)}
    ms_one = _graph_ms(calls[:1])
    ms_layers = _graph_ms(calls) / LAYERS
    res |= {"one_us": round(ms_one * 1e3, 1), "one": _tbps(byts, ms_one),
            "layers_us": round(ms_layers * 1e3, 1), "layers": _tbps(byts, ms_layers)}
    best: tuple[float, int, int] | None = None
    for per_sm in (2, 4, 8):
        for block in (1024, 4096):
            ms = _graph_ms([reader(caches[0], per_sm, block)])
            if best is None or ms < best[0]:
                best = (ms, per_sm, block)
    ms_read, per_sm, block = best
    readers = [reader(c, per_sm, block) for c in caches]
    ms_read_l = _graph_ms(readers) / LAYERS
    res |= {"read_us": round(ms_read * 1e3, 1), "read": _tbps(byts, ms_read),
            "read_l_us": round(ms_read_l * 1e3, 1), "read_l": _tbps(byts, ms_read_l),
            "read_grid": f"{per_sm}/SM x {block}"}
    res["layers_of_copy"] = round(res["layers"] * 1e12 / COPY_BW, 3)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res: dict[str, Any] = {"layers": LAYERS, "copy_TBps": COPY_BW / 1e12}
    for kvd, tag in ((torch.bfloat16, "bf16"), (torch.float8_e4m3fn, "fp8")):
        for b, c in POINTS:
            key = f"{tag}_b{b}_ctx{c}"
            res[key] = point(b, c, kvd)
            print(key, res[key], flush=True)
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
