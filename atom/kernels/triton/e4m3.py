"""fp8 e4m3 values widened in registers: cache tiles as f16 for the attention kernels'
tensor-core dots (the GQA decode kernel's V tiles, the MLA decode kernel's latent tiles), and
weight words as f32 for the one-row GEMV's FMAs.
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


# e4m3_words_as_f32's values are the codes' times 2^-120 (an e4m3 exponent field read as an f32
# one, whose bias is 127, not 7): a caller multiplies it back in, folded into its scales.
E4M3_IN_F32_EXP = 120


@triton.jit
def _top_byte_as_f32(top):
    """The e4m3 code in bits 24..31 of `top` as the f32 whose sign, exponent field and mantissa
    bits are the code's (exact; subnormal codes become f32 subnormals): arithmetic >> 4 puts the
    sign at bit 31 with copies of it in bits 27..30, which the mask clears."""
    return ((top.to(tl.int32, bitcast=True) >> 4).to(tl.uint32, bitcast=True)
            & 0x87F00000).to(tl.float32, bitcast=True)


@triton.jit
def e4m3_words_as_f32(words, ROWS: tl.constexpr, COLS: tl.constexpr):
    """[ROWS, COLS] e4m3 values × 2^-120 in f32, from [ROWS, COLS // 4] int32 words (byte b of
    word j is column 4j + b), by integer shifts and masks: two or three integer operations an
    element where Triton's own widening issues one and a half conversions (e4m3x2 → f16x2,
    then f16 → f32). The e4m3 NaN codes (0x7F, 0xFF) come out finite; quantised weights never
    hold them."""
    u = words.to(tl.uint32, bitcast=True)
    b0 = _top_byte_as_f32(u << 24)
    b1 = _top_byte_as_f32(u << 16)
    b2 = _top_byte_as_f32(u << 8)
    b3 = _top_byte_as_f32(u)
    # join(join(b0, b2), join(b1, b3))[r, j, q, p] is column 4j + 2q + p: row-major order.
    return tl.reshape(tl.join(tl.join(b0, b2), tl.join(b1, b3)), [ROWS, COLS])
