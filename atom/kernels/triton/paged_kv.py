"""Where a run of token positions lives in the paged KV cache: shared by the attention kernels."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def paged_block_ids(bt_row, n, n_mask, PAGE: tl.constexpr):
    """The block-table entries (one row, at `bt_row`) of tokens `n`; masked ones 0.

    MLA decode loads a tile's entries one iteration ahead of its latents, issued before the
    tile's offsets are computed: otherwise each iteration waits on two dependent global loads in
    a row (an fp8 tile is converted in registers, which Triton's stages do not prefetch). Ahead,
    it reads 3–9% more bytes a second over fp8 and 2–8% over bf16 at 16 heads. The GQA decode
    kernel keeps its entries in the iteration (ahead, its fp8 reads were 3–6% slower at large
    batches: research/probes/gqa_bt_prefetch_probe.py) but for its first tile's, which it loads
    before the PDL wait."""
    return tl.load(bt_row + n // PAGE, mask=n_mask, other=0)


@triton.jit
def paged_block_offsets(blk, n, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                        PAGE: tl.constexpr):
    """Element offsets of head `kvh` of tokens `n`, whose pages are `blk`."""
    return blk.to(tl.int64) * c_blk_stride + (n % PAGE) * c_tok_stride + kvh * c_head_stride


@triton.jit
def paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                     PAGE: tl.constexpr):
    """Element offsets of head `kvh` of tokens `n` (one row of the block table at `bt_row`)."""
    return paged_block_offsets(paged_block_ids(bt_row, n, n_mask, PAGE), n, kvh, c_blk_stride,
                               c_tok_stride, c_head_stride, PAGE)
