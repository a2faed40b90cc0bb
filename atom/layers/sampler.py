"""Sampling from logits: penalties, temperature, top-k, top-p, per-request seeds, logprobs.

Sampling is an exponential race (argmax of p / E with E ~ Exp(1)), so a seeded request draws its
noise from its own generator and samples the same tokens alone or inside any batch.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class SamplingBatch:
    temperatures: torch.Tensor  # [B] float, 0 = greedy
    top_ks: Optional[torch.Tensor]  # [B] int (vocab size = off) or None when no row uses it
    top_ps: Optional[torch.Tensor]  # [B] float or None
    generators: list[Optional[torch.Generator]]  # per row; None = the shared stream
    all_greedy: bool
    penalties: Optional["PenaltyBatch"] = None
    max_logprobs: int = -1  # -1 = none requested


@dataclass
class PenaltyBatch:
    output_counts: torch.Tensor  # [B, V] token counts in each row's output
    seen_mask: torch.Tensor  # [B, V] bool, token appeared in prompt or output
    presence: torch.Tensor  # [B]
    frequency: torch.Tensor  # [B]
    repetition: torch.Tensor  # [B]


def apply_penalties(logits: torch.Tensor, p: PenaltyBatch) -> torch.Tensor:
    rep = p.repetition.unsqueeze(1)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(p.seen_mask, penalized, logits)
    logits = logits - p.frequency.unsqueeze(1) * p.output_counts
    return logits - p.presence.unsqueeze(1) * (p.output_counts > 0).to(logits.dtype)


def _mask_top_k_top_p(logits: torch.Tensor, top_ks: Optional[torch.Tensor],
                      top_ps: Optional[torch.Tensor]) -> torch.Tensor:
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    keep = torch.ones_like(sorted_logits, dtype=torch.bool)
    if top_ks is not None:
        ranks = torch.arange(logits.shape[-1], device=logits.device).unsqueeze(0)
        keep &= ranks < top_ks.unsqueeze(1)
    if top_ps is not None:
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass strictly before each token
        keep &= before < top_ps.unsqueeze(1)
    keep[:, 0] = True
    masked = sorted_logits.masked_fill(~keep, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, idx, masked)


def _exponential_noise(shape: tuple[int, int], gens: list[Optional[torch.Generator]],
                       device: torch.device) -> torch.Tensor:
    q = torch.empty(shape, device=device, dtype=torch.float32)
    shared = [i for i, g in enumerate(gens) if g is None]
    if shared:
        q[shared] = torch.empty((len(shared), shape[1]), device=device).exponential_()
    for i, g in enumerate(gens):
        if g is not None:
            q[i].exponential_(generator=g)
    return q


def sample(logits: torch.Tensor, sb: SamplingBatch) -> torch.Tensor:
    """logits [B, V] float → token ids [B]."""
    if sb.all_greedy and sb.penalties is None:
        # exact in any float dtype: skip the fp32 copy. max's indices are argmax's (the first
        # maximum) and on the CPU 3x faster (0.17 against 0.50 ms for 8 x 49152 float32).
        return logits.max(-1).indices
    if sb.penalties is not None:
        logits = apply_penalties(logits.float(), sb.penalties)
        if sb.all_greedy:
            return logits.argmax(-1)
    if logits.is_cuda and _gpu_sampler_available():
        # The kernel widens each element as it reads it: an fp32 copy of bf16 logits first was
        # 0.16 ms of the 8B run's 25.7 ms decode step (traced, 415 rows x 128k vocab).
        return _gpu_sample(logits, sb)
    logits = logits.float()
    greedy = logits.argmax(-1)
    probs = probabilities(logits, sb.temperatures, sb.top_ks, sb.top_ps)
    q = _exponential_noise(tuple(probs.shape), sb.generators, probs.device)
    sampled = (probs / q).argmax(-1)
    return torch.where(sb.temperatures == 0, greedy, sampled)


def probabilities(logits: torch.Tensor, temperatures: torch.Tensor,
                  top_ks: Optional[torch.Tensor], top_ps: Optional[torch.Tensor]) -> torch.Tensor:
    """The float32 distribution a row samples from: softmax(logits / T) truncated by top-k and
    top-p (what the rejection sampler needs as the target's p, and a draft head as its q)."""
    scaled = logits.float() / temperatures.clamp(min=1e-5).unsqueeze(1)
    if top_ks is not None or top_ps is not None:
        scaled = _mask_top_k_top_p(scaled, top_ks, top_ps)
    return scaled.softmax(-1)


@functools.cache
def _gpu_sampler_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def _row_seeds(gens: list[Optional[torch.Generator]], device: torch.device) -> torch.Tensor:
    """One fresh seed per row per step: seeded rows draw theirs from their own generator, so a
    seeded request samples the same tokens alone or inside any batch."""
    seeds = torch.randint(0, 2**31 - 1, (len(gens),), device=device)
    for i, g in enumerate(gens):
        if g is not None:
            seeds[i] = torch.randint(0, 2**31 - 1, (1,), device=device, generator=g)[0]
    return seeds


def _gpu_sample(logits: torch.Tensor, sb: SamplingBatch) -> torch.Tensor:
    """The Triton sampler: greedy rows argmax, the rest one Gumbel-max pass, top-k/top-p by
    rejection against a rising pivot (no vocabulary sort)."""
    from atom.kernels.triton.sampling import sample as triton_sample  # Triton: CUDA runs only

    return triton_sample(logits, sb.temperatures, sb.top_ks, sb.top_ps,
                         _row_seeds(sb.generators, logits.device))


def compute_logprobs(logits: torch.Tensor, tokens: torch.Tensor, k: int):
    """(logprob of each sampled token [B], top-k (values, ids) [B, k]) from the raw logits."""
    lp = logits.float().log_softmax(-1)
    chosen = lp.gather(1, tokens.unsqueeze(1)).squeeze(1)
    top = lp.topk(k, dim=-1) if k > 0 else None
    return chosen, top
