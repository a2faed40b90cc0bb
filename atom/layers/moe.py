"""Mixture of experts in plain torch: routing, experts as stacked weights.

Two routers: softmax top-k over the router logits (Qwen3-MoE), and DeepSeek-V3's grouped top-k
(sigmoid scores, a learned per-expert bias that only steers the choice, the best `topk_group` of
`n_group` expert groups first). Under tensor parallelism each expert's intermediate dimension is
split across the ranks like a dense MLP; under expert parallelism each rank holds 1/ep of the
experts whole and computes only the routed pairs of those (every rank sees every token and routes
them alike). Either way a rank's output is a partial sum, all-reduced once. The experts
themselves are the kernel backend's `fused_moe`, in the model dtype or as fp8 codes with their
scales (block scales shard with the widths, on 128-column boundaries).
"""
from __future__ import annotations

import functools
from typing import Union

import torch
import torch.nn.functional as F
from torch import nn

from atom.kernels.expert_quant import scale_shape
from atom.kernels.fp8_weight import BLOCK, E4M3, Fp8Weight, quantize
from atom.kernels.quantized_weight import QUANTIZED, Quantized
from atom.layers.model_context import ModelContext

Part = Union[torch.Tensor, Quantized]  # a checkpoint's expert matrix: float, GGUF blocks or fp8


def _dense(part: Part) -> torch.Tensor:
    return part.dequantize(torch.float32) if isinstance(part, QUANTIZED) else part


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
    tokens, as global expert ids. With `mc.fp8_experts` they are held as e4m3 codes (w13, w2)
    with float32 scales (w13_scale, w2_scale; expert_quant.py's layouts) and never exist in
    float: an fp8 checkpoint's parts are kept as read, a float one's quantized as each part
    arrives (quant=fp8), one expert at a time. reduce_results=False leaves each rank's partial
    sum for the caller to add to others (shared experts) before one all-reduce."""

    def __init__(self, mc: ModelContext, num_experts: int, hidden: int, intermediate: int,
                 reduce_results: bool = True) -> None:
        super().__init__()
        self.backend, self.parallel = mc.backend, mc.parallel
        self.reduce_results = reduce_results
        p = mc.parallel
        if num_experts % p.ep_size:
            raise ValueError(f"{num_experts} experts over {p.ep_size} expert-parallel ranks")
        self.num_experts = num_experts
        self.num_local = num_experts // p.ep_size
        self.first_expert = p.ep_rank * self.num_local
        # Expert parallelism keeps every expert whole: its ranks are the tp ranks (ParallelState).
        split, self.inter_rank = (1, 0) if p.ep_size > 1 else (p.tp_size, p.tp_rank)
        self.inter = intermediate // split
        self.fp8 = mc.fp8_experts
        block = self.fp8 == "block"
        if block and self.inter % BLOCK:  # the up rows must start on a scale block
            raise ValueError(f"block-fp8 experts need each rank's expert width to be a multiple "
                             f"of {BLOCK}: {intermediate} over {split} ranks is {self.inter}")
        dtype = E4M3 if self.fp8 else None
        shapes = ((self.num_local, 2 * self.inter, hidden), (self.num_local, hidden, self.inter))
        self.w13, self.w2 = (nn.Parameter(torch.empty(s, dtype=dtype), requires_grad=False)
                             for s in shapes)
        for name, s in zip(("w13_scale", "w2_scale"), shapes):
            self.register_buffer(name, None if self.fp8 is None else torch.empty(
                scale_shape(*s, block), dtype=torch.float32))
        for w in (self.w13, self.w2):
            w.weight_loader = self.weight_loader  # type: ignore[attr-defined]
            w.holds_expert = self.holds_expert  # type: ignore[attr-defined]
            if self.fp8 is not None:  # the loader hands fp8 and float parts over as they are
                w.fp8_experts = True  # type: ignore[attr-defined]
                w.put_dense_expert = functools.partial(  # type: ignore[attr-defined]
                    self._store_dense, w)

    def holds_expert(self, expert: int) -> bool:
        """Whether this rank keeps that expert: the loader does not read the others' tensors."""
        return self.first_expert <= expert < self.first_expert + self.num_local

    def weight_loader(self, param: nn.Parameter, loaded: Part, shard_id) -> None:
        """shard_id = (expert, 'gate'|'up'|'down'), or ('all', 'gate_up'|'down') for fused
        tensors [E, 2I, H] / [E, H, I]; another rank's experts are not kept."""
        expert, which = shard_id
        if expert != "all":
            if self.holds_expert(expert):
                self._put(expert - self.first_expert, which, loaded)
            return
        for e in range(self.num_local):
            part = loaded[self.first_expert + e]
            if which == "gate_up":  # gate rows then up rows
                half = part.shape[0] // 2
                self._put(e, "gate", part[:half])
                self._put(e, "up", part[half:])
            else:
                self._put(e, "down", part)

    def _put(self, e: int, which: str, part: Part) -> None:
        """One expert's gate, up or down matrix as the checkpoint has it → this rank's share
        of it (rows of gate and up, columns of down), in the form held. A float part of fp8
        experts is quantized whole before it is sharded, as linears are (fp8_online.py)."""
        param = self.w2 if which == "down" else self.w13
        if self.fp8 is not None and not isinstance(part, Fp8Weight):
            part = quantize(_dense(part).to(param.device), self.fp8 == "block")
        r, n = self.inter_rank * self.inter, self.inter
        if isinstance(part, QUANTIZED):
            part = part.columns(r, n) if which == "down" else part.rows(r, n)
        else:
            part = part.narrow(1 if which == "down" else 0, r, n)
        if self.fp8 is None:
            part = _dense(part).to(param.dtype)
        self._store(param, e, n if which == "up" else 0, part)

    def _store(self, param: nn.Parameter, e: int, row: int, part: Part) -> None:
        """Rows [row, row + len(part)) of expert e: the values, or the codes and their scales."""
        rows = param.data[e].narrow(0, row, part.shape[0])
        if not isinstance(part, Fp8Weight):
            rows.copy_(part)
            return
        if part.input_scale is not None or (part.block_scale is not None) != (self.fp8 == "block"):
            raise ValueError(f"fp8 experts held with {self.fp8} scales and dynamic activations "
                             "got a part scaled otherwise")
        rows.copy_(part.qweight)
        scale = (self.w2_scale if param is self.w2 else self.w13_scale)[e]
        if part.block_scale is not None:
            scale.narrow(0, row // BLOCK, part.block_scale.shape[0]).copy_(part.block_scale)
        else:
            scale.narrow(0, row, part.shape[0]).copy_(part.weight_scale)

    def _store_dense(self, param: nn.Parameter, e: int, values: torch.Tensor) -> None:
        """Expert e's whole slice of param from float values, quantized (dummy weights)."""
        self._store(param, e, 0, quantize(values, self.fp8 == "block"))

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
        the experts held here, all-reduced unless the caller reduces."""
        out = self.backend.fused_moe(x, self.w13, self.w2, weights, self.local_experts(experts),
                                     w13_scale=self.w13_scale, w2_scale=self.w2_scale)
        return self.parallel.all_reduce(out) if self.reduce_results else out


def held_experts(model: nn.Module) -> str:
    """Which experts this rank's MoE layers hold, for the start-up log: with expert
    parallelism it is the line that says the experts were split, and how."""
    layers = [m for m in model.modules() if isinstance(m, FusedMoE)]
    if not layers:
        return "no MoE layers"
    m = layers[0]
    held = "" if m.fp8 is None else f" fp8 with {m.fp8} scales"
    return (f"experts {m.first_expert}..{m.first_expert + m.num_local - 1} of {m.num_experts} "
            f"(w13 {list(m.w13.shape)}, w2 {list(m.w2.shape)}{held}) in each of {len(layers)} "
            "MoE layers")
