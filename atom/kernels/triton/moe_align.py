"""The router's choice laid out for a grouped GEMM: (token, slot) pairs grouped by expert, each
expert's run padded to whole blocks of block_m rows, and the expert of every block.

Three launches on the device, a counting sort over chunks of CHUNK pairs: per-chunk expert
counts (one program a chunk), each chunk's first row per expert (one program: a prefix sum
over experts and chunks), then each chunk's scatter (one program a chunk): no program walks
more than one chunk's pairs but the middle one, which walks one count per chunk and expert. In
torch ops it would be ~25 small launches (counts, prefix sums, an argsort, scatters). Every
size depends only on T·k, the expert count and block_m, never on the routing: no host sync,
so the MoE forward can be captured in a CUDA graph and replayed for any routing. The buffers
hold at most T·k + min(E, T·k)·(block_m − 1) rows (each expert hit wastes at most
block_m − 1 rows of padding); blocks past the last used one get expert −1 and their programs
exit at once. Within an expert the pairs keep their order (chunk by chunk, no atomics), so the
layout is the same run to run.
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
def _count_kernel(experts_ptr, counts_ptr, sorted_ptr, block_expert_ptr, pairs, num_experts, cap,
                  num_blocks, CHUNK: tl.constexpr, BINS: tl.constexpr, FILL: tl.constexpr):
    """Program c: the per-expert counts of pairs [c·CHUNK, (c+1)·CHUNK) into counts[c], and its
    share of the fills (padding rows = the pair count, blocks = −1), which the scatter
    overwrites after it. Padding pairs take bin num_experts."""
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    f = tl.arange(0, FILL)
    rows_each = tl.cdiv(cap, progs)
    end = tl.minimum(cap, (pid + 1) * rows_each)
    for s in range(pid * rows_each, end, FILL):
        tl.store(sorted_ptr + s + f, pairs, mask=s + f < end)
    blocks_each = tl.cdiv(num_blocks, progs)
    end = tl.minimum(num_blocks, (pid + 1) * blocks_each)
    for s in range(pid * blocks_each, end, FILL):
        tl.store(block_expert_ptr + s + f, -1, mask=s + f < end)
    idx = pid * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(experts_ptr + idx, mask=idx < pairs, other=num_experts).to(tl.int32)
    tl.store(counts_ptr + pid * BINS + tl.arange(0, BINS), tl.histogram(e, BINS))


@triton.jit(do_not_specialize=["chunks"])
def _offsets_kernel(counts_ptr, chunks, num_experts, BLOCK_M: tl.constexpr, BINS: tl.constexpr,
                    ROWS: tl.constexpr):
    """One program, in place: counts[c, e] → the first row of chunk c's pairs of expert e
    (the expert's padded run start, plus the pairs of e in the chunks before c), ROWS chunks'
    counts at a time."""
    bins = tl.arange(0, BINS)
    rows = tl.arange(0, ROWS)
    total = tl.zeros((BINS,), dtype=tl.int32)
    for c0 in range(0, chunks, ROWS):
        c = c0 + rows
        tile = tl.load(counts_ptr + c[:, None] * BINS + bins[None, :], mask=c[:, None] < chunks,
                       other=0)
        total += tl.sum(tile, axis=0)
    padded = tl.where(bins < num_experts, (total + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    carry = tl.cumsum(padded, 0) - padded
    for c0 in range(0, chunks, ROWS):
        c = c0 + rows
        ptrs = counts_ptr + c[:, None] * BINS + bins[None, :]
        tile = tl.load(ptrs, mask=c[:, None] < chunks, other=0)
        tl.store(ptrs, carry[None, :] + tl.cumsum(tile, 0) - tile, mask=c[:, None] < chunks)
        carry += tl.sum(tile, axis=0)


@triton.jit(do_not_specialize=["pairs"])
def _scatter_kernel(experts_ptr, offsets_ptr, sorted_ptr, block_expert_ptr, pairs, num_experts,
                    BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, TILE: tl.constexpr,
                    BINS: tl.constexpr):
    """Program c: each pair of its chunk to its row, the chunk's first row for its expert plus
    the number of earlier pairs of the chunk with the same expert (counted by comparing TILE
    pairs at a time: no sort)."""
    pid = tl.program_id(0)
    i = tl.arange(0, CHUNK)
    first = pid * CHUNK
    e = tl.load(experts_ptr + first + i, mask=first + i < pairs, other=num_experts).to(tl.int32)
    rank = tl.zeros((CHUNK,), dtype=tl.int32)
    for j0 in range(0, CHUNK, TILE):
        j = j0 + tl.arange(0, TILE)
        ej = tl.load(experts_ptr + first + j, mask=first + j < pairs,
                     other=num_experts).to(tl.int32)
        before = (ej[None, :] == e[:, None]) & (j[None, :] < i[:, None])
        rank += tl.sum(before.to(tl.int32), axis=1)
    real = e < num_experts
    row = tl.load(offsets_ptr + pid * BINS + e, mask=real, other=0) + rank
    tl.store(sorted_ptr + row, first + i, mask=real)
    # A block's first row always holds a pair (padding only ends a run): it names the block.
    tl.store(block_expert_ptr + row // BLOCK_M, e, mask=real & (row % BLOCK_M == 0))


CHUNK = 256  # pairs a program: its in-chunk ranks cost CHUNK² / 2 compares
TILE = 32
FILL = 1024
# Counts the offsets program reads at once (32 a thread at 8 warps): R1's prefill chunk of
# 8192 tokens is 256 chunks of 512 bins, 16 tiles a pass.
OFFSET_TILE = 8192


def align(experts: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """experts: [T, k] expert ids (distinct within a row, as top-k gives them)."""
    flat = experts.reshape(-1)
    pairs = flat.numel()
    cap = capacity(pairs, num_experts, block_m)
    sorted_ids = torch.empty(cap, dtype=torch.int32, device=flat.device)
    block_expert = torch.empty(cap // block_m, dtype=torch.int32, device=flat.device)
    bins = triton.next_power_of_2(num_experts + 1)
    chunks = max(1, triton.cdiv(pairs, CHUNK))
    counts = torch.empty(chunks, bins, dtype=torch.int32, device=flat.device)
    _count_kernel[(chunks,)](flat, counts, sorted_ids, block_expert, pairs, num_experts, cap,
                             cap // block_m, CHUNK=CHUNK, BINS=bins, FILL=FILL, num_warps=4)
    _offsets_kernel[(1,)](counts, chunks, num_experts, BLOCK_M=block_m, BINS=bins,
                          ROWS=max(1, OFFSET_TILE // bins), num_warps=8)
    _scatter_kernel[(chunks,)](flat, counts, sorted_ids, block_expert, pairs, num_experts,
                               BLOCK_M=block_m, CHUNK=CHUNK, TILE=TILE, BINS=bins, num_warps=4)
    return ExpertBlocks(sorted_ids, block_expert, block_m)
