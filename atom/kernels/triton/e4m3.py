"""fp8 e4m3 cache tiles read as f16 in registers, for the attention kernels' tensor-core dots.

Shared by the GQA decode kernel (its V tiles) and the MLA decode kernel (its latent tiles, the
second operand of both of its dots).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_e4m3_as_f16(ptr, off, row_mask, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """[ROWS, HEAD_DIM] e4m3 values (row r at ptr + off[r]) as f16, converted in registers right
    after a 16-byte load, four bytes a conversion (two cvt.rn.f16x2.e4m3x2 into two packed f16x2
    registers).

    The conversion is inline assembly marked impure so that it stays where it is written. A plain
    `.to(f16)` (or a pure asm) is moved by Triton past each use's layout change: V, the dot's
    second operand along its rows, then goes through shared memory as bytes (a byte-by-byte,
    bank-conflicted transpose), and MLA's latent, an operand of two dots, is converted twice.
    Pinned here, the f16 tile is stored to shared memory once and both dots read it by ldmatrix
    (research/probes/mla_decode_ptx.py --fp8 --sass: one conversion a latent element, 3.6 SASS
    instructions each in MLA's KV loop against 5.6 unpinned; decode_ptx.py --fp8 --sass: GQA's
    loop 803 a thread per 32 KB tile against 953)."""
    raw = tl.load(ptr.to(tl.pointer_type(tl.int8)) + off[:, None]
                  + tl.arange(0, HEAD_DIM)[None, :], mask=row_mask[:, None], other=0)
    return tl.inline_asm_elementwise(
        asm="{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; "
            "cvt.rn.f16x2.e4m3x2 $1, hi; }",
        constraints="=r,=r,r", args=[raw], dtype=tl.float16, is_pure=False, pack=4)
