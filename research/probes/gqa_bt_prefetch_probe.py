"""GQA decode with each tile's block-table entries loaded one tile ahead, against atom's kernel.

Why: MLA decode reads 3–9% more bytes a second with its entries loaded ahead (run 98, now in
atom/kernels/triton/mla_decode.py), but the same change written into the GQA kernel made its fp8
reads 4–6% slower at the 8B run's operating points (run 99: 3.03 → 2.93 TB/s at 416 × 1.5k).
That version computed the offsets before issuing the next tile's load; this one issues the load
first, as the MLA kernel does, and, as a second variant, only over fp8 caches (bf16's K and V
are staged by Triton's pipeliner, which already runs the entries' load ahead). The variants are
atom's kernel source with the loop head rewritten, so the probe follows the kernel as it
changes; their output must equal atom's exactly.

    python research/probes/gqa_bt_prefetch_probe.py [--out FILE]
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

HEAD = """    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        kv_off = paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride,
                                  c_head_stride, PAGE)
"""
AHEAD = """    n = lo + tl.arange(0, BLOCK_N)
    blk_next = paged_block_ids(bt_row, n, n < hi, PAGE)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        blk = blk_next
        blk_next = paged_block_ids(bt_row, n + BLOCK_N, n + BLOCK_N < hi, PAGE)
        kv_off = paged_block_offsets(blk, n, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                                     PAGE)
"""
AHEAD_FP8 = """    n = lo + tl.arange(0, BLOCK_N)
    blk_next = paged_block_ids(bt_row, n, n < hi, PAGE)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        if E4M3_REGS:
            blk = blk_next
            blk_next = paged_block_ids(bt_row, n + BLOCK_N, n + BLOCK_N < hi, PAGE)
        else:
            blk = paged_block_ids(bt_row, n, n_mask, PAGE)
        kv_off = paged_block_offsets(blk, n, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                                     PAGE)
"""
IMPORT = "from atom.kernels.triton.paged_kv import paged_kv_offsets\n"
IMPORTS = "from atom.kernels.triton.paged_kv import paged_block_ids, paged_block_offsets\n"


def variant(name: str, head: str):
    """atom's paged_decode_attention module with the loop head rewritten, imported from a
    temporary file (Triton reads a kernel's source from its file)."""
    src = (ROOT / "atom/kernels/triton/paged_decode_attention.py").read_text()
    assert src.count(HEAD) == 1 and src.count(IMPORT) == 1, "the kernel changed: update this probe"
    path = Path(tempfile.mkdtemp()) / f"paged_decode_{name}.py"
    path.write_text(src.replace(HEAD, head).replace(IMPORT, IMPORTS))
    spec = importlib.util.spec_from_file_location(f"paged_decode_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from gpu_bench import _graph_ms
    from probe_kit import decode_case

    from atom.kernels.triton.paged_decode_attention import decode_attention

    fns = {"atom": decode_attention, "ahead": variant("ahead", AHEAD).decode_attention,
           "ahead_fp8": variant("ahead_fp8", AHEAD_FP8).decode_attention}
    res: dict[str, float | bool] = {}
    for kvd, tag in ((torch.float8_e4m3fn, "fp8"), (torch.bfloat16, "bf16")):
        for b, c in ((416, 1536), (512, 1024), (256, 2048)):
            case = decode_case(b, c, kv_dtype=kvd)
            byts = 2 * case.kc.numel() * case.kc.element_size()
            outs = {}
            for name, fn in fns.items():
                out = torch.empty_like(case.q)
                ms = _graph_ms(lambda: fn(case.q, case.kc, case.vc, case.meta, 128 ** -0.5,
                                          out=out))
                res[f"{tag}_b{b}_ctx{c}_{name}"] = round(byts / (ms * 1e-3) / 1e12, 3)
                outs[name] = out
            for name in fns:
                res[f"{tag}_b{b}_ctx{c}_{name}_equal"] = bool(torch.equal(outs["atom"], outs[name]))
            print(tag, b, c, {k.split(f"ctx{c}_")[-1]: v for k, v in res.items()
                              if k.startswith(f"{tag}_b{b}_ctx{c}_")}, flush=True)
            del case
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
