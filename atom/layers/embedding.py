"""Vocab-parallel embedding and LM head: each rank holds a contiguous slice of the vocabulary."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from atom.layers.distributed import all_gather_last_dim, all_reduce, tp_rank, tp_size
from atom.layers.forward_context import backend


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int) -> None:
        super().__init__()
        n = tp_size()
        self.vocab_size = vocab_size
        self.shard = (vocab_size + n - 1) // n
        self.start = tp_rank() * self.shard
        self.weight = nn.Parameter(torch.empty(self.shard, hidden), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        part = loaded[self.start:self.start + self.shard]
        param.data.zero_()
        param.data[: part.shape[0]].copy_(part)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if tp_size() == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.start
        inside = (local >= 0) & (local < self.shard)
        out = F.embedding(local.clamp(0, self.shard - 1), self.weight) * inside.unsqueeze(-1)
        return all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        logits = backend().linear(hidden, self.weight)
        if tp_size() > 1:
            logits = all_gather_last_dim(logits)
        return logits[..., : self.vocab_size]
