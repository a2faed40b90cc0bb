"""Tensor-parallel linear layers. Each parameter carries a `weight_loader` that takes the full
checkpoint tensor and keeps this rank's shard, so the loader never needs to know the TP layout."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from atom.layers.distributed import all_reduce, tp_rank, tp_size
from atom.layers.forward_context import backend


def _shard(t: torch.Tensor, dim: int) -> torch.Tensor:
    n = tp_size()
    if n == 1:
        return t
    size = t.shape[dim] // n
    return t.narrow(dim, tp_rank() * size, size)


class LinearBase(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)
            self.bias.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        param.data.copy_(loaded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return backend().linear(x, self.weight, self.bias)


class ReplicatedLinear(LinearBase):
    pass


class ColumnParallelLinear(LinearBase):
    """Output features split across ranks; no communication."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        assert out_features % tp_size() == 0, (out_features, tp_size())
        super().__init__(in_features, out_features // tp_size(), bias)

    def weight_loader(self, param, loaded, shard_id=None):
        param.data.copy_(_shard(loaded, 0))


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs stored as one matrix (gate_up_proj); shard_id = index."""

    def __init__(self, in_features: int, output_sizes: list[int], bias: bool = False) -> None:
        self.output_sizes = output_sizes
        super().__init__(in_features, sum(output_sizes), bias)

    def weight_loader(self, param, loaded, shard_id=None):
        n = tp_size()
        offset = sum(self.output_sizes[:shard_id]) // n
        size = self.output_sizes[shard_id] // n
        param.data.narrow(0, offset, size).copy_(_shard(loaded, 0))


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections as one matrix; heads split across ranks (shard_id = q | k | v)."""

    def __init__(self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        self.head_dim, self.num_heads, self.num_kv_heads = head_dim, num_heads, num_kv_heads
        n = tp_size()
        kv_rows = max(num_kv_heads, n) * head_dim  # every rank keeps at least one KV head
        super().__init__(hidden, num_heads * head_dim + 2 * kv_rows, bias)

    def weight_loader(self, param, loaded, shard_id=None):
        n = tp_size()
        q = self.num_heads * self.head_dim // n
        kv = max(1, self.num_kv_heads // n) * self.head_dim
        offset, size = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[shard_id]
        if shard_id != "q" and self.num_kv_heads < n:  # this rank's replica of one KV head
            head = tp_rank() * self.num_kv_heads // n
            loaded = loaded.narrow(0, head * self.head_dim, self.head_dim)
        else:
            loaded = _shard(loaded, 0)
        param.data.narrow(0, offset, size).copy_(loaded)


class RowParallelLinear(LinearBase):
    """Input features split across ranks; partial outputs summed with an all-reduce."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        assert in_features % tp_size() == 0, (in_features, tp_size())
        super().__init__(in_features // tp_size(), out_features, bias)

    def weight_loader(self, param, loaded, shard_id=None):
        param.data.copy_(_shard(loaded, 1) if param.dim() == 2 else loaded)

    def forward(self, x: torch.Tensor, silu_gate: bool = False) -> torch.Tensor:
        """With silu_gate, x is a gated MLP's [gate | up] and silu(gate) * up is what gets
        projected: a backend can fuse the activation into the projection (batch-1 GEMV)."""
        bias: Optional[torch.Tensor] = self.bias if tp_rank() == 0 else None
        be = backend()
        if silu_gate:
            return all_reduce(be.silu_and_mul_linear(x, self.weight, bias))
        return all_reduce(be.linear(x, self.weight, bias))
