"""Weight rows pulled into L2 by a program before it waits on the kernel ahead of it (PDL).

A decode-step GEMV streams weights that no kernel writes, so nothing makes it wait to read
them: only x comes from the kernel before. Under PDL a GEMV's programs are scheduled while the
previous kernel's last programs still run, and until now they spent that time parked in
griddepcontrol.wait with the DRAM idle on their SMs (the fp8 GEMV's fit, t ≈ 2.57 µs + bytes /
3.58 TB/s, is mostly that ramp). Here each program issues Hopper's bulk L2 prefetch
(cp.async.bulk.prefetch.L2, one instruction a chunk, no registers held) over the first bytes
of its rows first, then waits; its loads then find those lines in L2 or already on the way.

The budget is per program and small (tens of KB), so the programs resident at once (two an SM)
stay far inside the 50 MB L2.
"""
from __future__ import annotations

import triton
import triton.language as tl

# Hopper's bulk copies move whole 16-byte units from 16-byte-aligned addresses.
ALIGN = 16


@triton.jit
def prefetch_rows_l2(row_ptrs, n_bytes, CHUNKS: tl.constexpr, CHUNK_ELEMS: tl.constexpr):
    """Prefetch CHUNKS chunks of n_bytes (a multiple of 16) from each row start in row_ptrs
    ([R] pointers, 16-byte aligned), chunk c at row_ptrs + c * CHUNK_ELEMS elements."""
    addr = row_ptrs[:, None] + (tl.arange(0, CHUNKS) * CHUNK_ELEMS)[None, :]
    size = tl.full(addr.shape, 0, tl.int32) + n_bytes
    tl.inline_asm_elementwise(
        asm="cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0;",
        constraints="=r,l,r", args=[addr.to(tl.int64), size], dtype=tl.int32,
        is_pure=False, pack=1)


def plan(row_bytes: int, stride_bytes: int, base_ptr: int, block_n: int, budget: int,
         threads: int) -> tuple[int, int]:
    """(CHUNKS, chunk bytes) for a program of block_n rows of row_bytes each, at most `budget`
    bytes in all, one chunk a thread where the rows allow; (0, 0) when the rows are not
    16-byte aligned or the budget is 0 (no prefetch)."""
    if budget <= 0 or base_ptr % ALIGN or stride_bytes % ALIGN or row_bytes < ALIGN:
        return 0, 0
    per_row = min(budget // block_n, row_bytes) // ALIGN * ALIGN
    chunks = max(1, min(threads // block_n, per_row // ALIGN))
    chunks = 1 << (chunks.bit_length() - 1)  # a power of two: tl.arange's length
    chunk = per_row // chunks // ALIGN * ALIGN
    return (chunks, chunk) if chunk else (0, 0)
