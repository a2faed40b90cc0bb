"""e4m3_words_as_f32: every e4m3 code widened by integer ops to the f32 that torch's conversion
gives, times 2^-120, bit for bit (subnormal codes included), in column order."""
import torch
import triton
import triton.language as tl

from atom.kernels.triton.e4m3 import E4M3_IN_F32_EXP, e4m3_words_as_f32
from kernel_helpers import DEVICE


@triton.jit
def _widen(w_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)
    c4 = tl.arange(0, COLS // 4)
    words = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + r[:, None] * (COLS // 4) + c4[None, :])
    c = tl.arange(0, COLS)
    tl.store(out_ptr + r[:, None] * COLS + c[None, :], e4m3_words_as_f32(words, ROWS, COLS))


def test_every_code_widens_exactly_in_column_order():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # the two NaN codes: quantised weights never hold them
    # Two rows, the second the first reversed, so a column-order slip cannot hide.
    w = torch.stack([codes, codes.flip(0)]).view(torch.float8_e4m3fn).to(DEVICE)
    out = torch.empty(2, 256, dtype=torch.float32, device=DEVICE)
    _widen[(1,)](w, out, ROWS=2, COLS=256)
    want = w.float() * 2.0 ** -E4M3_IN_F32_EXP
    assert torch.equal(out.view(torch.int32), want.view(torch.int32))
