"""The decode attention kernel's PTX for sm_90, compiled on this (GPU-less) machine, with counts
of the instructions that tell how it loads and multiplies.

Why: device minutes are scarce, and the PTX answers some questions without them: the fifth
session found fp8 V read byte by byte from shared memory this way (`ld.shared.b8`), the sixth
that tokens-as-M dots compile to wgmma. The launch specialises pointers and integer arguments
divisible by 16 (`tt.divisibility`); without those attributes the PTX shows 2-byte scalar loads
that the real launch does not have, so they are given here as the launch would. The PTX comes
from this machine's Triton (3.9 at the sixth session); the GPU host runs 3.6, whose pipelining
may differ: a finding here is a lead, confirmed on the device.

`--sass` disassembles the cubin (Triton's bundled cuobjdump) and counts the instructions of the
KV loop's body by opcode: one thread's work per BLOCK_N-token tile. The sixteenth session
(Triton 3.9, 128-token tiles, 4 warps, the launch's stages): fp8 726 instructions per 32 KB tile
(128 F2FP e4m3 -> f16x2 conversions), bf16 608 per 64 KB, 2.4x the instructions per byte.

    python research/probes/decode_ptx.py [--fp8] [--split] [--block-n 128 --warps 4 --stages 2] [--sass] [--out k.ptx]
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from atom.kernels.triton.paged_decode_attention import _decode_kernel

PATTERNS = ("wgmma.mma_async", "mma.sync", "ldmatrix", "cp.async.cg", "ld.global.v4",
            "ld.global.b16", "ld.global.b8", "ld.shared.b8", "ld.shared.b16", "st.shared",
            "cvt.rn.f16x2.e4m3x2", "ex2", "bar.sync")


def decode_kernel(fp8: bool, block_n: int, warps: int, stages: int, split: bool = False):
    kv = "*fp8e4nv" if fp8 else "*bf16"
    sig = {"q_ptr": "*bf16", "kc_ptr": kv, "vc_ptr": kv, "o_ptr": "*bf16", "mid_o_ptr": "*fp32",
           "mid_lse_ptr": "*fp32", "count_ptr": "*i32", "ctx_ptr": "*i32", "bt_ptr": "*i32"}
    sig |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                               "c_blk_stride", "c_tok_stride", "c_head_stride", "bt_stride")}
    sig |= {"qk_scale": "fp32", "v_scale": "fp32", "window": "i32", "head_dim": "i32",
            "n_q_heads": "i32", "n_splits": "i32"}
    consts = dict(GROUP=4, G_PAD=16, PAGE=16, BLOCK_N=block_n, HEAD_DIM=128, SPLIT=split,
                  SPLIT_PAD=32,
                  HAS_WINDOW=False, DOT=tl.float16 if fp8 else tl.bfloat16, PREC="tf32",
                  PDL=False, E4M3_REGS=fp8)
    sig |= {k: "constexpr" for k in consts}
    names = list(sig)
    div16 = [n for n in names if n.endswith("_ptr") or n.endswith("_stride") and n != "bt_stride"
             or n in ("head_dim", "n_q_heads")]  # bt_stride is do_not_specialize in the kernel
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = ASTSource(_decode_kernel, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=stages))


def loop_body_ops(cubin: bytes) -> tuple[int, collections.Counter]:
    """The longest backward branch's body in the cubin's SASS: its length and opcode counts."""
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", f.name],
                              capture_output=True, text=True, check=True).stdout
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in
           re.finditer(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", sass)]
    loops = [(int(b.group(1), 16), a) for a, t in ins
             if (b := re.search(r"BRA.*?0x([0-9a-f]+)", t)) and int(b.group(1), 16) < a]
    lo, hi = max(loops, key=lambda x: x[1] - x[0])
    body = [t for a, t in ins if lo <= a <= hi]
    return len(body), collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0]
                                          for t in body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--split", action="store_true", help="the split-KV variant (merge inside)")
    ap.add_argument("--out", default=None, help="write the PTX here")
    ap.add_argument("--sass", action="store_true", help="count the KV loop's SASS by opcode")
    a = ap.parse_args()
    kernel = decode_kernel(a.fp8, a.block_n, a.warps, a.stages, a.split)
    ptx = kernel.asm["ptx"]
    print({p: len(re.findall(re.escape(p), ptx)) for p in PATTERNS})
    if a.sass:
        n, ops = loop_body_ops(kernel.asm["cubin"])
        tile_kb = 2 * a.block_n * 128 * (1 if a.fp8 else 2) / 1024
        print(f"KV loop: {n} instructions a thread per {tile_kb:.0f} KB tile of K and V "
              f"({n / tile_kb:.1f} per KB), shared memory {kernel.metadata.shared} B")
        print(dict(ops.most_common(12)))
    if a.out:
        with open(a.out, "w") as f:
            f.write(ptx)


if __name__ == "__main__":
    main()
