"""Vocab-parallel embedding and LM head: each rank holds a contiguous slice of the vocabulary.

A quantized table is dequantized into the float parameter (a lookup reads a few rows, so float
costs nothing per token) and also kept on the parameter as `quantized`: the LM head, which
reads the whole table every step, runs on the backend's prepared form of it. With tied
embeddings the parameter is shared, so the head finds the embedding's table there."""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from atom.kernels.backend import KernelBackend
from atom.kernels.quantized_weight import QuantizedWeight
from atom.layers.model_context import ModelContext


class VocabParallelEmbedding(nn.Module):
    def __init__(self, mc: ModelContext, vocab_size: int, hidden: int) -> None:
        super().__init__()
        self.parallel = mc.parallel
        n = mc.parallel.tp_size
        self.vocab_size = vocab_size
        self.shard = (vocab_size + n - 1) // n
        self.start = mc.parallel.tp_rank * self.shard
        self.weight = nn.Parameter(torch.empty(self.shard, hidden), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        self.weight.takes_quantized = True  # type: ignore[attr-defined]

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor | QuantizedWeight,
                      shard_id=None) -> None:
        rows = min(self.shard, loaded.shape[0] - self.start)
        if isinstance(loaded, QuantizedWeight):
            part = loaded.rows(self.start, rows)
            if rows == self.shard:
                param.quantized = part  # type: ignore[attr-defined]
            loaded_rows = part.dequantize(param.dtype)
        else:
            loaded_rows = loaded[self.start:self.start + rows]
        param.data.zero_()
        param.data[:rows].copy_(loaded_rows)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.parallel.tp_size == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.start
        inside = (local >= 0) & (local < self.shard)
        out = F.embedding(local.clamp(0, self.shard - 1), self.weight) * inside.unsqueeze(-1)
        return self.parallel.all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    def __init__(self, mc: ModelContext, vocab_size: int, hidden: int) -> None:
        super().__init__(mc, vocab_size, hidden)
        self.backend = mc.backend
        self.head_weight: Optional[Any] = None  # the backend's prepared quantized table

    def prepare_weights(self, be: KernelBackend) -> None:
        qw = getattr(self.weight, "quantized", None)
        if qw is not None:
            self.head_weight = be.prepare_weight(qw)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        w = self.weight if self.head_weight is None else self.head_weight
        logits = self.parallel.all_gather_last_dim(self.backend.linear(hidden, w))
        return logits[..., : self.vocab_size]
