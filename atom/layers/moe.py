"""Mixture of experts in plain torch: top-k softmax routing, experts as stacked weights.

Experts' intermediate dimension is split across TP ranks like a dense MLP, so the output is an
all-reduced partial sum. Tokens are grouped per expert, so each expert runs one matmul.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from atom.runner.distributed import all_reduce, tp_rank, tp_size
from atom.runner.forward_context import backend


class FusedMoE(nn.Module):
    def __init__(self, num_experts: int, top_k: int, hidden: int, intermediate: int,
                 renormalize: bool) -> None:
        super().__init__()
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.inter = intermediate // tp_size()
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * self.inter, hidden), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden, self.inter), requires_grad=False)
        self.w13.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        self.w2.weight_loader = self.weight_loader  # type: ignore[attr-defined]

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id) -> None:
        """shard_id = (expert, 'gate'|'up'|'down'), or ('all', 'gate_up'|'down') for fused tensors."""
        expert, which = shard_id
        r, n = tp_rank() * self.inter, self.inter
        if expert == "all":
            if which == "gate_up":  # [E, 2I, H]: gate rows then up rows
                full = loaded.shape[1] // 2
                param.data[:, :n].copy_(loaded[:, r:r + n])
                param.data[:, n:].copy_(loaded[:, full + r:full + r + n])
            else:
                param.data.copy_(loaded[:, :, r:r + n])
            return
        if which == "gate":
            param.data[expert, :n].copy_(loaded[r:r + n])
        elif which == "up":
            param.data[expert, n:].copy_(loaded[r:r + n])
        else:
            param.data[expert].copy_(loaded[:, r:r + n])

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(router_logits.float(), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x, dtype=torch.float32)
        flat = experts.flatten()
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        token_of = order // self.top_k
        w_sorted = weights.flatten()[order]
        start = 0
        act = backend()
        for e, c in enumerate(counts):
            if c == 0:
                continue
            idx = token_of[start:start + c]
            h = act.silu_and_mul(F.linear(x[idx], self.w13[e]))
            y = F.linear(h, self.w2[e]).float() * w_sorted[start:start + c].unsqueeze(-1)
            out.index_add_(0, idx, y)
            start += c
        return all_reduce(out.to(x.dtype))
