"""A weight-streaming program's next tiles pulled into L2 ahead of its loads.

A one-row GEMV streams weights that no kernel writes. Two things starve its DRAM:

- Under PDL its programs are scheduled while the previous kernel's last programs still run,
  and they sat in griddepcontrol.wait with nothing requested (the fp8 GEMV's fit, t ≈ 2.57 µs
  + bytes / 3.58 TB/s, is mostly that ramp). The weights do not depend on that kernel, so
  their first tiles can be requested before the wait.
- In the loop a thread's loads for the next tile are issued only after this tile's arithmetic,
  so the bytes in flight an SM shrink as the work an element grows: fp8 does ~1.8x bf16's
  instructions a byte (e4m3 -> f16 -> f32, then the FMA) and streams at 73% of copy where bf16
  reaches 91% (8B gate_up).

So a program requests its first PREFETCH tiles before the wait and, at every tile, the tile
PREFETCH ahead: `prefetch.global.L2` a 128-byte line, one instruction a thread or less, no
register held, no value changed. The loads then find their lines in L2 or on their way.
"""
from __future__ import annotations

import triton
import triton.language as tl

LINE = 128  # bytes: the L2 line a prefetch fetches


@triton.jit
def prefetch_l2(ptrs):
    """Fetch into L2 the line at every address in `ptrs` (any shape)."""
    tl.inline_asm_elementwise(asm="prefetch.global.L2 [$1]; mov.u32 $0, 0;",
                              constraints="=r,l", args=[ptrs.to(tl.int64)], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def prefetch_tile(w_rows, k0, k_dim, BLOCK_K: tl.constexpr, LINE_ELEMS: tl.constexpr):
    """The lines of columns [k0, k0 + BLOCK_K) of the rows at w_rows ([R, 1] pointers), clamped
    to the row (a repeated line is harmless, a line past the row could fault)."""
    cols = tl.minimum(k0 + tl.arange(0, BLOCK_K // LINE_ELEMS) * LINE_ELEMS, k_dim - 1)
    prefetch_l2(w_rows + cols[None, :])
