"""MLA decode with each tile's block-table entries loaded one tile ahead, against atom's kernel.

Why: an fp8 latent tile is converted in registers, so Triton's stages do not prefetch it, and
each iteration waits on two global loads in a row: the tile's block-table entries, then the
latents they address (run 93: the fp8 kernel runs ~0.7 warp-instructions a cycle an SM, waiting).
Loading the next tile's entries one iteration early takes the first of those latencies off the
critical path for a register or two. The variant is atom's kernel source with that loop head
rewritten (so the probe follows the kernel as it changes); its output must equal atom's exactly.
Prints TB/s of latent read at 16 heads, fp8 and bf16, at the defaults' tiles.

    python research/probes/mla_bt_prefetch_probe.py [--sass] [--out FILE]

`--sass` compiles both for sm_90 here (no GPU) and prints the KV loop's instruction counts.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

HEAD = """    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        blk = tl.load(bt_row + n // PAGE, mask=n_mask, other=0).to(tl.int64)
"""
PREFETCHED = """    n_first = lo + tl.arange(0, BLOCK_N)
    blk_next = tl.load(bt_row + n_first // PAGE, mask=n_first < hi, other=0)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        blk = blk_next.to(tl.int64)
        n_next = n + BLOCK_N
        blk_next = tl.load(bt_row + n_next // PAGE, mask=n_next < hi, other=0)
"""


def prefetch_module():
    """atom's mla_decode module with the loop head rewritten, imported from a temporary file
    (Triton reads a kernel's source from its file)."""
    src = (ROOT / "atom/kernels/triton/mla_decode.py").read_text()
    assert src.count(HEAD) == 1, "the kernel's loop head changed: update this probe"
    path = Path(tempfile.mkdtemp()) / "mla_decode_bt_prefetch.py"
    path.write_text(src.replace(HEAD, PREFETCHED))
    spec = importlib.util.spec_from_file_location("mla_decode_bt_prefetch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sass() -> None:
    import mla_decode_ptx
    from decode_ptx import loop_body_ops

    kernels = (("atom", mla_decode_ptx._mla_decode_kernel),
               ("prefetch", prefetch_module()._mla_decode_kernel))
    for fp8, bn, warps, stages in ((True, 64, 4, 1), (False, 64, 4, 2)):
        for name, kern in kernels:
            mla_decode_ptx._mla_decode_kernel = kern
            k = mla_decode_ptx.mla_decode_kernel(fp8, 16, bn, warps, stages, True)
            n, ops = loop_body_ops(k.asm["cubin"])
            print(f"{'fp8' if fp8 else 'bf16'} {name}: {n} instructions a thread per tile, "
                  f"{mla_decode_ptx.ptxas_usage(k.asm['ptx'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.sass:
        sass()
        return
    from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case

    from atom.kernels.triton.mla_decode import mla_decode_attention

    variant = prefetch_module()
    res: dict[str, float | bool] = {}
    for kvd, tag in ((torch.float8_e4m3fn, "fp8"), (torch.bfloat16, "bf16")):
        for b, c in ((64, 1024), (64, 4096), (128, 1024), (128, 4096), (256, 4096)):
            q, cache, meta, byts = _mla_decode_case(b, c, 16, kvd)
            outs = {}
            for name, fn in (("atom", mla_decode_attention),
                             ("prefetch", variant.mla_decode_attention)):
                out = torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda",
                                  dtype=torch.bfloat16)
                ms = _graph_ms(lambda: fn(q, cache, meta, R1_LATENT[0], 192 ** -0.5, 1.0,
                                          out=out))
                res[f"{tag}_b{b}_ctx{c}_{name}"] = round(byts / (ms * 1e-3) / 1e12, 3)
                outs[name] = out
            res[f"{tag}_b{b}_ctx{c}_equal"] = bool(torch.equal(outs["atom"], outs["prefetch"]))
            print(tag, b, c, {k.rsplit("_", 1)[-1]: v for k, v in res.items()
                              if k.startswith(f"{tag}_b{b}_ctx{c}_")}, flush=True)
            del q, cache
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
