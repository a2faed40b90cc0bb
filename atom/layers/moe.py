"""Mixture of experts in plain torch: routing, experts as stacked weights.

Two routers: softmax top-k over the router logits (Qwen3-MoE), and DeepSeek-V3's grouped top-k
(sigmoid scores, a learned per-expert bias that only steers the choice, the best `topk_group` of
`n_group` expert groups first). Under tensor parallelism each expert's intermediate dimension is
split across the ranks like a dense MLP; under expert parallelism each rank holds 1/ep of the
experts whole and computes only the routed pairs of those (every rank sees every token and routes
them alike). Either way a rank's output is a partial sum, all-reduced once. The experts
themselves are the kernel backend's `fused_moe`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from atom.layers.model_context import ModelContext


def softmax_topk(router_logits: torch.Tensor, top_k: int,
                 renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [T, k] float32, expert ids [T, k])."""
    weights, experts = F.softmax(router_logits.float(), dim=-1).topk(top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights, experts


def grouped_topk(router_logits: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int,
                 topk_group: int, renormalize: bool,
                 scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's "noaux_tc" routing: a group scores the sum of its two best biased scores,
    experts are picked among the best topk_group groups by biased score, and weighted by their
    unbiased sigmoid score (renormalized over the k, then times routed_scaling_factor: 2.5 in
    R1). The bias balances load without entering the output."""
    scores = router_logits.float().sigmoid()
    choice = scores + bias.float()
    t, e = choice.shape
    group_scores = choice.view(t, n_group, e // n_group).topk(2, dim=-1)[0].sum(-1)
    groups = group_scores.topk(topk_group, dim=-1, sorted=False)[1]
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, groups, True)
    keep = keep.unsqueeze(-1).expand(t, n_group, e // n_group).reshape(t, e)
    experts = choice.masked_fill(~keep, float("-inf")).topk(top_k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, experts)
    if renormalize:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * scaling, experts


class GroupedTopKRouter(nn.Module):
    """DeepSeek-V3's `mlp.gate`: the router matrix and e_score_correction_bias, kept in float32
    whatever the model dtype, as transformers keeps them: in bf16 the biased scores of
    near-tied experts round together and the top-k choice flips."""

    def __init__(self, hidden: int, num_experts: int, top_k: int, n_group: int, topk_group: int,
                 renormalize: bool, scaling: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden, dtype=torch.float32),
                                   requires_grad=False)
        self.e_score_correction_bias = nn.Parameter(torch.empty(num_experts, dtype=torch.float32),
                                                    requires_grad=False)
        self.top_k, self.n_group, self.topk_group = top_k, n_group, topk_group
        self.renormalize, self.scaling = renormalize, scaling

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = F.linear(x.float(), self.weight)
        return grouped_topk(logits, self.e_score_correction_bias, self.top_k, self.n_group,
                            self.topk_group, self.renormalize, self.scaling)


class FusedMoE(nn.Module):
    """The experts of one MoE layer that this rank holds; the router's choice comes in with the
    tokens, as global expert ids."""

    def __init__(self, mc: ModelContext, num_experts: int, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.backend, self.parallel = mc.backend, mc.parallel
        p = mc.parallel
        if num_experts % p.ep_size:
            raise ValueError(f"{num_experts} experts over {p.ep_size} expert-parallel ranks")
        self.num_experts = num_experts
        self.num_local = num_experts // p.ep_size
        self.first_expert = p.ep_rank * self.num_local
        # Expert parallelism keeps every expert whole: its ranks are the tp ranks (ParallelState).
        split, self.inter_rank = (1, 0) if p.ep_size > 1 else (p.tp_size, p.tp_rank)
        self.inter = intermediate // split
        self.w13 = nn.Parameter(torch.empty(self.num_local, 2 * self.inter, hidden),
                                requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(self.num_local, hidden, self.inter), requires_grad=False)
        for w in (self.w13, self.w2):
            w.weight_loader = self.weight_loader  # type: ignore[attr-defined]
            w.holds_expert = self.holds_expert  # type: ignore[attr-defined]

    def holds_expert(self, expert: int) -> bool:
        """Whether this rank keeps that expert: the loader does not read the others' tensors."""
        return self.first_expert <= expert < self.first_expert + self.num_local

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id) -> None:
        """shard_id = (expert, 'gate'|'up'|'down'), or ('all', 'gate_up'|'down') for fused
        tensors; another rank's experts are not kept."""
        expert, which = shard_id
        r, n = self.inter_rank * self.inter, self.inter
        if expert == "all":
            loaded = loaded[self.first_expert:self.first_expert + self.num_local]
            if which == "gate_up":  # [E, 2I, H]: gate rows then up rows
                full = loaded.shape[1] // 2
                param.data[:, :n].copy_(loaded[:, r:r + n])
                param.data[:, n:].copy_(loaded[:, full + r:full + r + n])
            else:
                param.data.copy_(loaded[:, :, r:r + n])
            return
        if not self.holds_expert(expert):
            return
        e = expert - self.first_expert
        if which == "gate":
            param.data[e, :n].copy_(loaded[r:r + n])
        elif which == "up":
            param.data[e, n:].copy_(loaded[r:r + n])
        else:
            param.data[e].copy_(loaded[:, r:r + n])

    def local_experts(self, experts: torch.Tensor) -> torch.Tensor:
        """Global expert ids → this rank's (indices into w13/w2); a pair routed to another
        rank's expert gets num_local, one past the last held expert, which the expert loop and
        the fused kernel's block layout skip: it costs no compute and adds nothing here. An id
        rather than a zeroed router weight, which would still be computed (on some held
        expert), and rather than an expert offset, which every backend would have to take."""
        if self.num_local == self.num_experts:
            return experts
        local = experts - self.first_expert
        return local.masked_fill((local < 0) | (local >= self.num_local), self.num_local)

    def forward(self, x: torch.Tensor, weights: torch.Tensor,
                experts: torch.Tensor) -> torch.Tensor:
        """x: [T, H]; weights, experts: [T, k], the router's choice → Σ weight · expert(x) over
        the experts held here, all-reduced."""
        return self.parallel.all_reduce(
            self.backend.fused_moe(x, self.w13, self.w2, weights, self.local_experts(experts)))


def held_experts(model: nn.Module) -> str:
    """Which experts this rank's MoE layers hold, for the start-up log: with expert
    parallelism it is the line that says the experts were split, and how."""
    layers = [m for m in model.modules() if isinstance(m, FusedMoE)]
    if not layers:
        return "no MoE layers"
    m = layers[0]
    return (f"experts {m.first_expert}..{m.first_expert + m.num_local - 1} of {m.num_experts} "
            f"(w13 {list(m.w13.shape)}, w2 {list(m.w2.shape)}) in each of {len(layers)} MoE layers")
