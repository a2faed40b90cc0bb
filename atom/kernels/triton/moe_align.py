"""The router's choice laid out for a grouped GEMM: (token, slot) pairs grouped by expert, each
expert's run padded to whole blocks of block_m rows, and the expert of every block.

Everything stays on the device and every size depends only on T·k, the expert count and
block_m, never on the routing: no host sync, so the MoE forward can be captured in a CUDA graph
and replayed for any routing. The buffers hold at most T·k + min(E, T·k)·(block_m − 1) rows
(each expert hit wastes at most block_m − 1 rows of padding); blocks past the last used one get
expert −1 and their programs exit at once.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


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


def align(experts: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """experts: [T, k] expert ids (distinct within a row, as top-k gives them)."""
    flat = experts.reshape(-1).long()
    pairs = flat.numel()
    dev = flat.device
    # scatter_add, not bincount: bincount reads its input's max back to the host on CUDA.
    counts = torch.zeros(num_experts, dtype=torch.long, device=dev).scatter_add_(
        0, flat, torch.ones_like(flat))
    padded_end = ((counts + block_m - 1) // block_m * block_m).cumsum(0)
    padded_start = padded_end - (counts + block_m - 1) // block_m * block_m
    start = counts.cumsum(0) - counts
    order = flat.argsort(stable=True)
    expert_of = flat[order]
    dest = padded_start[expert_of] + torch.arange(pairs, device=dev) - start[expert_of]
    cap = capacity(pairs, num_experts, block_m)
    sorted_ids = torch.full((cap,), pairs, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, dest, order.int())
    block_start = torch.arange(0, cap, block_m, device=dev)
    # The first expert whose padded run ends after the block's start; empty experts end where
    # the previous one does, so they own no block.
    block_expert = torch.searchsorted(padded_end, block_start, right=True)
    block_expert = torch.where(block_start < padded_end[-1], block_expert, -1).int()
    return ExpertBlocks(sorted_ids, block_expert, block_m)
