"""When each program of an MLA decode call starts, gets its first tile, leaves its loop and ends
(the GPU's global timer, read inside atom's kernel), to find what the call's fixed cost is.

Why: at 16 heads in a graph of 8 layers (research/probes/mla_decode_fixed_cost.py, run 102) the
kernel's times fit ~14 µs plus the bytes at 4.06 TB/s, where a plain read of the same bytes fits
~4 µs plus 4.58 TB/s: ~10 µs a call that is neither bandwidth nor the split merge (256 × 1k has
no merge and carries it too), which is what holds 1k contexts at 50–65% of copy. Per point,
relative to the first program's start (µs, medians and maxima over the programs):
  start     when a program began (the launch's spread over the SMs)
  wait      its PDL wait returned (before: only the context length is read)
  first     its first tile's scores and softmax were done (q, the block-table entries and the
            first latents loaded: the chain of dependent loads before the loop runs)
  loop      its last tile was done, and per tile after the first
  end       its output was stored
The timed kernel is atom's with five timer reads and their stores added (a copy of atom's module
with its source rewritten, imported from a temporary file: Triton reads a kernel's source from
its file), so its own call time is printed beside atom's to show what the timers cost.

    python research/probes/mla_decode_timeline.py [--out FILE]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case  # noqa: E402

from atom.kernels.triton.mla_decode import mla_decode_attention  # noqa: E402

STAMPS = ("start", "wait", "first", "loop", "end")
# (anchor in atom/kernels/triton/mla_decode.py, replacement): each must occur exactly once.
EDITS = (
    ("from atom.kernels.metadata import AttentionMetadata\n",
     "from atom.kernels.metadata import AttentionMetadata\n"
     "from triton.language.extra.cuda import globaltimer\nTIMES = None\n"),
    ("def _mla_decode_kernel(q_ptr,", "def _mla_decode_kernel(t_ptr, q_ptr,"),
    ("    tile = tl.program_id(0)  #",
     "    t_start = globaltimer()\n    tile = tl.program_id(0)  #"),
    ("    ctx = tl.load(ctx_ptr + seq)\n    pdl_wait(PDL)\n",
     "    ctx = tl.load(ctx_ptr + seq)\n    pdl_wait(PDL)\n    t_wait = globaltimer()\n"
     "    t_row = t_ptr + ((split * tl.num_programs(1) + seq) * tl.num_programs(0) + tile) * 8\n"),
    ("        m_i = m_new\n",
     "        m_i = m_new\n        tl.store(t_row + 2, globaltimer(), mask=start == lo)\n"),
    ("    l_safe = tl.where(l_i == 0.0, 1.0, l_i)\n",
     "    t_loop = globaltimer()\n    l_safe = tl.where(l_i == 0.0, 1.0, l_i)\n"),
    ("        tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)\n",
     "        tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)\n"
     "    tl.store(t_row + 0, t_start)\n    tl.store(t_row + 1, t_wait)\n"
     "    tl.store(t_row + 3, t_loop)\n    tl.store(t_row + 4, globaltimer())\n"
     "    tl.store(t_row + 5, tl.cdiv(hi - lo, BLOCK_N))\n"),
    ("    _mla_decode_kernel[(tiles, batch, n_split)](\n        q,",
     "    _mla_decode_kernel[(tiles, batch, n_split)](\n        TIMES, q,"),
)


def timed_module():
    src = (ROOT / "atom/kernels/triton/mla_decode.py").read_text()
    for anchor, new in EDITS:
        assert src.count(anchor) == 1, f"atom's kernel changed, update this probe: {anchor!r}"
        src = src.replace(anchor, new)
    path = Path(tempfile.mkdtemp()) / "mla_decode_timed.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("mla_decode_timed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stats(x: torch.Tensor) -> dict[str, float]:
    return {"med": round(float(x.median()), 2), "max": round(float(x.max()), 2)}


def timeline(times: torch.Tensor) -> dict[str, Any]:
    """times: [programs, 8] int64 ns (start, wait, first, loop, end, tiles) → µs from the first
    start."""
    t = times[times[:, 0] > 0].double()
    t0 = t[:, 0].min()
    rel = {name: (t[:, i] - t0) / 1e3 for i, name in enumerate(STAMPS)}
    tiles = t[:, 5]
    many = tiles > 1
    per_tile = ((t[many, 3] - t[many, 2]) / (tiles[many] - 1) / 1e3) if many.any() else None
    out: dict[str, Any] = {name: _stats(v) for name, v in rel.items()}
    out["first_after_wait"] = _stats(rel["first"] - rel["wait"])
    out["end_after_loop"] = _stats(rel["end"] - rel["loop"])
    if per_tile is not None:
        out["per_tile_after_first"] = _stats(per_tile)
    out["span_us"] = round(float(rel["end"].max()), 2)
    out["programs"] = int(t.shape[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    mod = timed_module()
    res: dict[str, Any] = {}
    for kvd, tag in ((torch.bfloat16, "bf16"), (torch.float8_e4m3fn, "fp8")):
        for b, c in ((64, 1024), (256, 1024), (64, 4096), (256, 8192)):
            q, cache, meta, byts = _mla_decode_case(b, c, 16, kvd)
            out = torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
            mod.TIMES = torch.zeros(b * 64 * 8, 8, device="cuda", dtype=torch.int64)
            args = (q, cache, meta, R1_LATENT[0], 192 ** -0.5, 1.0)
            atom_ms = _graph_ms(lambda: mla_decode_attention(*args, out=out))
            timed_ms = _graph_ms(lambda: mod.mla_decode_attention(*args, out=out))
            mod.TIMES.zero_()
            torch.empty(256 << 20, device="cuda", dtype=torch.int8).zero_()  # L2 cold, as timed
            mod.mla_decode_attention(*args, out=out)  # one eager call
            torch.cuda.synchronize()
            key = f"{tag}_b{b}_ctx{c}"
            res[key] = {"MB": round(byts / 1e6, 1), "atom_us": round(atom_ms * 1e3, 1),
                        "timed_us": round(timed_ms * 1e3, 1)} | timeline(mod.TIMES.cpu())
            print(key, json.dumps(res[key]), flush=True)
            del q, cache
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
