"""The ranks and groups a model shards itself over, built once per worker and handed to it.

Layers read their rank from the state they were built with, never from the default
torch.distributed group: a draft model beside the target, or expert and data parallel groups
apart from the tensor-parallel one, each get the state that is theirs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ParallelState:
    tp_size: int = 1
    tp_rank: int = 0
    tp_group: Optional[Any] = None  # a torch.distributed ProcessGroup; None: the default one
    dp_size: int = 1
    dp_rank: int = 0
    # Expert parallelism: each MoE layer's experts split whole over ep_size ranks. The ep ranks
    # are the tp ranks (ep_size 1 or tp_size): every rank sees every token, so an MoE output is
    # a sum over the tp group whether its ranks hold expert slices or intermediate slices.
    ep_size: int = 1
    ep_rank: int = 0

    def __post_init__(self) -> None:
        for size, rank, what in ((self.tp_size, self.tp_rank, "tp"),
                                 (self.dp_size, self.dp_rank, "dp"),
                                 (self.ep_size, self.ep_rank, "ep")):
            if size < 1 or not 0 <= rank < size:
                raise ValueError(f"{what} rank {rank} of {size}")
        if self.ep_size > 1 and (self.ep_size, self.ep_rank) != (self.tp_size, self.tp_rank):
            raise ValueError(f"ep rank {self.ep_rank} of {self.ep_size}: experts shard over the "
                             f"tp ranks (tp rank {self.tp_rank} of {self.tp_size}) or not at all")

    @classmethod
    def of_process(cls, expert_parallel: bool = False) -> "ParallelState":
        """Tensor parallelism over the whole torch.distributed world when this process joined
        one (an executor worker does, before building its model), else a single rank; with
        `expert_parallel` the same ranks split the experts. Data parallel replicas are separate
        engine processes, each of them one replica here."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        size, rank = dist.get_world_size(), dist.get_rank()
        ep_size, ep_rank = (size, rank) if expert_parallel else (1, 0)
        return cls(tp_size=size, tp_rank=rank, tp_group=dist.group.WORLD, ep_size=ep_size,
                   ep_rank=ep_rank)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """x summed over the tensor-parallel ranks, in place."""
        if self.tp_size > 1:
            dist.all_reduce(x, group=self.tp_group)
        return x

    def all_gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Every tensor-parallel rank's x [T, ...] stacked in rank order: [tp * T, ...]. Every
        rank's T must be the same (DP attention pads each rank's rows to the step's largest)."""
        if self.tp_size == 1:
            return x
        out = x.new_empty((self.tp_size * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=self.tp_group)
        return out

    def reduce_scatter_rows(self, x: torch.Tensor) -> torch.Tensor:
        """x [tp * T, ...] summed over the tensor-parallel ranks, this rank keeping its own T
        rows (the rank-th block): all_gather_rows' inverse for partial sums, at the bytes of
        half an all-reduce."""
        if self.tp_size == 1:
            return x
        out = x.new_empty((x.shape[0] // self.tp_size, *x.shape[1:]))
        dist.reduce_scatter_tensor(out, x.contiguous(), group=self.tp_group)
        return out

    def all_gather_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        """Every tensor-parallel rank's x side by side along the last dimension, in rank order."""
        if self.tp_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.tp_size)]
        dist.all_gather(parts, x.contiguous(), group=self.tp_group)
        return torch.cat(parts, dim=-1)
