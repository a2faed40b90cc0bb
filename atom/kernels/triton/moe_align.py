"""The router's choice laid out for a grouped GEMM: (token, slot) pairs grouped by expert, each
expert's run padded to whole blocks of block_m rows, and the expert of every block.

One launch of one program, on the device: in torch ops it is ~25 small launches (counts,
prefix sums, an argsort, scatters) for what is a few µs of work at decode sizes. Every
size depends only on T·k, the expert count and block_m, never on the routing: no host sync,
so the MoE forward can be captured in a CUDA graph and replayed for any routing. The buffers
hold at most T·k + min(E, T·k)·(block_m − 1) rows (each expert hit wastes at most
block_m − 1 rows of padding); blocks past the last used one get expert −1 and their programs
exit at once. Within an expert the pairs keep their order, so the layout is the same run to
run.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class ExpertBlocks:
    # [capacity] int32: flat pair ids (token · k + slot) grouped by expert, ascending within an
    # expert; padding rows hold the pair count (no pair).
    sorted_ids: torch.Tensor
    # [capacity // block_m] int32: the expert each block of sorted_ids belongs to, −1 if none.
    block_expert: torch.Tensor
    block_m: int

    @property
    def num_blocks(self) -> int:
        return self.block_expert.numel()


def capacity(pairs: int, num_experts: int, block_m: int) -> int:
    """Rows the padded layout can need: a whole number of blocks, from the sizes alone."""
    bound = pairs + min(num_experts, pairs) * (block_m - 1)
    return -(-bound // block_m) * block_m


@triton.jit(do_not_specialize=["pairs", "cap", "num_blocks"])
def _align_kernel(experts_ptr, sorted_ptr, block_expert_ptr, base_ptr, pairs, num_experts,
                  cap, num_blocks, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr,
                  TILE: tl.constexpr, BINS: tl.constexpr):
    """Counting sort in one program: per-expert counts (a histogram per chunk of pairs), the
    padded runs' starts (a prefix sum), then for each chunk a pair's row is its expert's next
    free row plus the number of earlier pairs of the chunk with the same expert (counted by
    comparing TILE pairs at a time: no sort). Registers cannot be indexed by a computed expert,
    so the per-expert rows go through base_ptr, between barriers. Padding pairs take bin
    num_experts and are never stored."""
    fill = tl.arange(0, CHUNK)
    for s in range(0, cap, CHUNK):
        tl.store(sorted_ptr + s + fill, pairs, mask=s + fill < cap)
    for s in range(0, num_blocks, CHUNK):
        tl.store(block_expert_ptr + s + fill, -1, mask=s + fill < num_blocks)
    bins = tl.arange(0, BINS)
    real_bin = bins < num_experts
    counts = tl.zeros((BINS,), dtype=tl.int32)
    for c0 in range(0, pairs, CHUNK):
        idx = c0 + tl.arange(0, CHUNK)
        e = tl.load(experts_ptr + idx, mask=idx < pairs, other=num_experts).to(tl.int32)
        counts += tl.histogram(e, BINS)
    padded = tl.where(real_bin, (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    running = tl.cumsum(padded, 0) - padded  # each expert's next free row
    for c0 in range(0, pairs, CHUNK):
        i = tl.arange(0, CHUNK)
        e = tl.load(experts_ptr + c0 + i, mask=c0 + i < pairs, other=num_experts).to(tl.int32)
        tl.store(base_ptr + bins, running)
        # The fills (first chunk) and base_ptr land before any thread reads or overwrites them.
        tl.debug_barrier()
        rank = tl.zeros((CHUNK,), dtype=tl.int32)
        for j0 in range(0, CHUNK, TILE):
            j = j0 + tl.arange(0, TILE)
            ej = tl.load(experts_ptr + c0 + j, mask=c0 + j < pairs,
                         other=num_experts).to(tl.int32)
            before = (ej[None, :] == e[:, None]) & (j[None, :] < i[:, None])
            rank += tl.sum(before.to(tl.int32), axis=1)
        real = e < num_experts
        row = tl.load(base_ptr + e, mask=real, other=0) + rank
        tl.store(sorted_ptr + row, c0 + i, mask=real)
        # A block's first row always holds a pair (padding only ends a run): it names the block.
        tl.store(block_expert_ptr + row // BLOCK_M, e, mask=real & (row % BLOCK_M == 0))
        running += tl.where(real_bin, tl.histogram(e, BINS), 0)
        tl.debug_barrier()  # every row read from base_ptr before the next chunk rewrites it


def _chunk(pairs: int) -> int:
    """Two sizes, not one per power of two: each is a compiled variant at start-up. The
    pairwise count costs CHUNK² compares per chunk: 1024 keeps a prefill chunk's 65k pairs
    (R1, T 8192) at 64 · 1M."""
    return 256 if pairs <= 256 else 1024


def align(experts: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """experts: [T, k] expert ids (distinct within a row, as top-k gives them)."""
    flat = experts.reshape(-1)
    pairs = flat.numel()
    cap = capacity(pairs, num_experts, block_m)
    sorted_ids = torch.empty(cap, dtype=torch.int32, device=flat.device)
    block_expert = torch.empty(cap // block_m, dtype=torch.int32, device=flat.device)
    bins = triton.next_power_of_2(num_experts + 1)
    base = torch.empty(bins, dtype=torch.int32, device=flat.device)
    chunk = _chunk(pairs)
    _align_kernel[(1,)](flat, sorted_ids, block_expert, base, pairs, num_experts, cap,
                        cap // block_m, BLOCK_M=block_m, CHUNK=chunk, TILE=32, BINS=bins,
                        num_warps=4 if chunk == 256 else 8)
    return ExpertBlocks(sorted_ids, block_expert, block_m)
