"""Where a run of token positions lives in the paged KV cache: shared by both attention kernels."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                     PAGE: tl.constexpr):
    """Element offsets of head `kvh` of tokens `n` (one row of the block table at `bt_row`)."""
    blk = tl.load(bt_row + n // PAGE, mask=n_mask, other=0).to(tl.int64)
    return blk * c_blk_stride + (n % PAGE) * c_tok_stride + kvh * c_head_stride
