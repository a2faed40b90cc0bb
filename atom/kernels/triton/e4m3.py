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
    after a 16-byte load. V is the dot's second operand along its rows: given a plain e4m3 load
    and `.to(f16)`, Triton converts after the shared-memory transpose, which for one-byte
    elements is a byte-by-byte, bank-conflicted read (the fp8 kernel read its bytes at half bf16's
    rate, the same elements per second). Two e4m3 at a time as one int16, one cvt each,
    keeps that transpose in 16 bits (ldmatrix.trans): 2.28 → 2.86 TB/s at 416 × 1.5k."""
    pairs = tl.load(ptr.to(tl.pointer_type(tl.int16)) + (off // 2)[:, None]
                    + tl.arange(0, HEAD_DIM // 2)[None, :], mask=row_mask[:, None], other=0)
    lo, hi = tl.inline_asm_elementwise(
        asm="{ .reg .b32 r; cvt.rn.f16x2.e4m3x2 r, $2; mov.b32 {$0, $1}, r; }",
        constraints="=h,=h,h", args=[pairs], dtype=(tl.float16, tl.float16), is_pure=True,
        pack=1)
    return tl.reshape(tl.join(lo, hi), [ROWS, HEAD_DIM])
