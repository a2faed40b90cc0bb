"""Tensor-parallel linear layers. Each parameter carries a `weight_loader` that takes the full
checkpoint tensor and keeps this rank's shard, so the loader never needs to know the TP layout.

A weight may arrive quantized (QuantizedWeight or Fp8Weight, in shards for the packed q|k|v and gate|up):
the layer keeps the pieces and, once loading is done, `prepare_weights` hands the whole matrix
to the kernel backend, whose prepared form replaces the float parameter. The float parameter
was allocated with torch.empty and never written, so it cost no memory."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import nn

from atom.kernels.backend import KernelBackend
from atom.kernels.quantized_weight import QUANTIZED, Quantized, cat_rows
from atom.layers.model_context import ModelContext
from atom.layers.parallel_state import ParallelState

Loaded = Union[torch.Tensor, Quantized]


def _shard(t: Loaded, dim: int, parallel: ParallelState) -> Loaded:
    n = parallel.tp_size
    if n == 1:
        return t
    size = t.shape[dim] // n
    start = parallel.tp_rank * size
    if isinstance(t, QUANTIZED):
        return t.rows(start, size) if dim == 0 else t.columns(start, size)
    return t.narrow(dim, start, size)


class LinearBase(nn.Module):
    # A weight read as a matrix outside forward (MLA's absorbed kv_b_proj) or kept exact (a
    # router) stays a float tensor: quantized pieces are dequantized into it, and online
    # quantization passes it by.
    keep_float: bool = False

    def __init__(self, mc: ModelContext, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.backend, self.parallel = mc.backend, mc.parallel
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        self.weight.takes_quantized = True  # type: ignore[attr-defined]
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)
            self.bias.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        else:
            self.register_parameter("bias", None)
        self._quantized: list[tuple[int, Quantized]] = []  # (first row, rows) as loaded

    def weight_loader(self, param: nn.Parameter, loaded: Loaded, shard_id=None) -> None:
        self._put(param, 0, loaded)

    def _put(self, param: nn.Parameter, row: int, loaded: Loaded) -> None:
        """Rows [row, row + len(loaded)) of param: copied, or kept quantized for prepare_weights."""
        if isinstance(loaded, QUANTIZED):
            self._quantized.append((row, loaded))
        else:
            param.data.narrow(0, row, loaded.shape[0]).copy_(loaded)

    def put_quantized(self, qw: Quantized) -> None:
        """This rank's whole weight, already sharded (dummy weights quantized in place)."""
        self._put(self.weight, 0, qw)

    def prepare_weights(self, be: KernelBackend) -> None:
        """The weight in the backend's form when every row came quantized and the backend has
        a kernel for it; else quantized pieces are dequantized into the float parameter."""
        parts, self._quantized = sorted(self._quantized, key=lambda p: p[0]), []
        if not parts:
            return
        w = self.weight
        prepared: Any = None
        if sum(p.shape[0] for _, p in parts) == w.shape[0] and not self.keep_float:
            prepared = be.prepare_weight(cat_rows([p for _, p in parts]))
        if prepared is None:
            for row, p in parts:
                w.data.narrow(0, row, p.shape[0]).copy_(p.dequantize(w.dtype))
            return
        del self.weight
        self.weight = prepared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backend.linear(x, self.weight, self.bias)


class ReplicatedLinear(LinearBase):
    pass


class ColumnParallelLinear(LinearBase):
    """Output features split across ranks; no communication."""

    def __init__(self, mc: ModelContext, in_features: int, out_features: int,
                 bias: bool = False) -> None:
        n = mc.parallel.tp_size
        assert out_features % n == 0, (out_features, n)
        super().__init__(mc, in_features, out_features // n, bias)

    def weight_loader(self, param, loaded, shard_id=None):
        self._put(param, 0, _shard(loaded, 0, self.parallel))


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs stored as one matrix (gate_up_proj); shard_id = index."""

    def __init__(self, mc: ModelContext, in_features: int, output_sizes: list[int],
                 bias: bool = False) -> None:
        self.output_sizes = output_sizes
        super().__init__(mc, in_features, sum(output_sizes), bias)

    def weight_loader(self, param, loaded, shard_id=None):
        offset = sum(self.output_sizes[:shard_id]) // self.parallel.tp_size
        self._put(param, offset, _shard(loaded, 0, self.parallel))


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections as one matrix; heads split across ranks (shard_id = q | k | v)."""

    def __init__(self, mc: ModelContext, hidden: int, head_dim: int, num_heads: int,
                 num_kv_heads: int, bias: bool = False) -> None:
        self.head_dim, self.num_heads, self.num_kv_heads = head_dim, num_heads, num_kv_heads
        kv_rows = max(num_kv_heads, mc.parallel.tp_size) * head_dim  # a KV head on every rank
        super().__init__(mc, hidden, num_heads * head_dim + 2 * kv_rows, bias)

    def weight_loader(self, param, loaded, shard_id=None):
        n = self.parallel.tp_size
        q = self.num_heads * self.head_dim // n
        kv = max(1, self.num_kv_heads // n) * self.head_dim
        offset = {"q": 0, "k": q, "v": q + kv}[shard_id]
        if shard_id != "q" and self.num_kv_heads < n:  # this rank's replica of one KV head
            start = self.parallel.tp_rank * self.num_kv_heads // n * self.head_dim
            loaded = (loaded.rows(start, self.head_dim) if isinstance(loaded, QUANTIZED)
                      else loaded.narrow(0, start, self.head_dim))
        else:
            loaded = _shard(loaded, 0, self.parallel)
        self._put(param, offset, loaded)


class RowParallelLinear(LinearBase):
    """Input features split across ranks; partial outputs summed with an all-reduce, or, with
    reduce_results=False, left partial for the caller to sum with others before one reduce."""

    def __init__(self, mc: ModelContext, in_features: int, out_features: int,
                 bias: bool = False, reduce_results: bool = True) -> None:
        n = mc.parallel.tp_size
        assert in_features % n == 0, (in_features, n)
        super().__init__(mc, in_features // n, out_features, bias)
        self.adds_bias = mc.parallel.tp_rank == 0  # the reduced sum gets the bias once
        self.reduce_results = reduce_results

    def weight_loader(self, param, loaded, shard_id=None):
        self._put(param, 0, _shard(loaded, 1, self.parallel) if param.dim() == 2 else loaded)

    def forward(self, x: torch.Tensor, silu_gate: bool = False) -> torch.Tensor:
        """With silu_gate, x is a gated MLP's [gate | up] and silu(gate) * up is what gets
        projected: a backend can fuse the activation into the projection (batch-1 GEMV).
        Either way the output is a block's last projection (o_proj, down_proj), only ever
        added to the residual stream, so a backend may leave it in its compute dtype."""
        bias: Optional[torch.Tensor] = self.bias if self.adds_bias else None
        if silu_gate:
            out = self.backend.silu_and_mul_linear(x, self.weight, bias)
        else:
            out = self.backend.block_output_linear(x, self.weight, bias)
        return self.parallel.all_reduce(out) if self.reduce_results else out
