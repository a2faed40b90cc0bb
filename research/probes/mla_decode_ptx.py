"""The MLA decode kernel's PTX for sm_90, compiled on this (GPU-less) machine: counts of the
instructions that tell how it loads and multiplies, and ptxas's registers and spills.

Why: as for decode_ptx.py (whose launch-like divisibility attributes this copies): the first
MLA kernel masked its loads against a runtime width and compiled to 2-byte scalar global loads,
which the PTX shows and no CPU test can. A finding here is a lead, confirmed on the device
(gpu_bench mla_decode_sweep).

    python research/probes/mla_decode_ptx.py [--fp8] [--rows 16] [--block-n 32 --warps 8 --stages 2] [--sass]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

from atom.kernels.triton.mla_decode import _mla_decode_kernel
from decode_ptx import PATTERNS, loop_body_ops


def mla_decode_kernel(fp8: bool, rows: int, block_n: int, warps: int, stages: int,
                      split: bool):
    ptrs = ("q_ptr", "c_ptr", "o_ptr", "mid_o_ptr", "mid_lse_ptr", "cu_q_ptr", "ctx_ptr", "bt_ptr")
    sig = {n: "*fp32" if n.startswith("mid") else "*i32" if n in ("cu_q_ptr", "ctx_ptr", "bt_ptr")
           else "*bf16" for n in ptrs}
    sig["c_ptr"] = "*fp8e4nv" if fp8 else "*bf16"
    sig |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                               "c_blk_stride", "c_tok_stride", "bt_stride", "n_heads", "n_splits")}
    sig |= {"qk_scale": "fp32", "kv_scale": "fp32"}
    consts = dict(L=512, R=64, HEADS=rows, M=rows, PAGE=16, BLOCK_N=block_n, LORA=512, ROPE=64,
                  SPLIT=split, DOT=tl.float16 if fp8 else tl.bfloat16, PREC="tf32", PDL=False,
                  E4M3_REGS=fp8)
    sig |= {k: "constexpr" for k in consts}
    sig = {n: sig[n] for n in _mla_decode_kernel.arg_names}  # attrs below index the kernel's order
    names = list(sig)
    div16 = [n for n in names if n.endswith("_ptr") or n.endswith("_stride") and n != "bt_stride"
             or n == "n_heads"]  # bt_stride and n_splits are do_not_specialize in the kernel
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = ASTSource(_mla_decode_kernel, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=stages))


def ptxas_usage(ptx: str) -> list[str]:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([get_ptxas(90).path, "--gpu-name", "sm_90a", "-v", str(src), "-o",
                            str(Path(d) / "k.cubin")], capture_output=True, text=True)
    return [line.split(":")[-1].strip() for line in r.stderr.splitlines()
            if "registers" in line or "spill" in line]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--rows", type=int, default=16, help="(query, head) rows per program")
    ap.add_argument("--block-n", type=int, default=32)
    ap.add_argument("--warps", type=int, default=8)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--out", default=None, help="write the PTX here")
    ap.add_argument("--sass", action="store_true", help="count the KV loop's SASS by opcode")
    a = ap.parse_args()
    kernel = mla_decode_kernel(a.fp8, a.rows, a.block_n, a.warps, a.stages, a.split)
    ptx = kernel.asm["ptx"]
    print({p: len(re.findall(re.escape(p), ptx)) for p in PATTERNS}, ptxas_usage(ptx))
    if a.sass:
        n, ops = loop_body_ops(kernel.asm["cubin"])
        elems = a.block_n * 576
        print(f"KV loop: {n} instructions a thread per {a.block_n}-token tile, "
              f"{n * a.warps * 32 / elems:.2f} per latent element, shared memory "
              f"{kernel.metadata.shared} B")
        print(dict(ops.most_common(12)))
    if a.out:
        Path(a.out).write_text(ptx)


if __name__ == "__main__":
    main()
