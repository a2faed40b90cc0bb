"""Rejection sampling of drafts that come with the distribution q they were drawn from.

Leviathan et al. (2023), "Fast Inference from Transformers via Speculative Decoding": draft x at
slot j stands with probability min(1, p(x) / q(x)), p the target's distribution at that position;
at the first rejection the token is drawn from norm(max(0, p - q)), and when every draft stands a
bonus token is drawn from p at the position after the last. Every emitted token is then an exact
sample of the target. Deterministic drafts (n-gram) are q = one-hot: the rule becomes "x stands
with probability p(x), else draw from p without x", which is what exact match against the
target's own sample does (runner/launched_step.py `accept_drafts`), so that path needs no
kernel. At temperature 0 p is one-hot too: exact match plus the bonus token.

Layout (shared with the Triton kernel, atom/kernels/triton/rejection_sampler.py): a batch of R
rows, row r owning positions [starts[r], starts[r] + counts[r]) of every [S, ...] tensor; its
first counts[r] - 1 positions carry a draft (draft_ids), the last is the bonus slot. `out`
arrives filled with the target's own samples and leaves with out[start + j] = the token kept
after input j for every j up to and including the first rejection (or the bonus slot); later
positions keep their sample, so exact match over `out` (accept_drafts) recovers the kept run.
Random numbers come in (`uniforms` [S], `noise` [S, V] ~ Exp(1)), so a seeded request's draws
come from its own generator (`draw_randomness`) and the kernel is tested against this reference
on the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from atom.layers.sampler import SamplingBatch, probabilities
from atom.spec_decode.draft_plan import Stager


def rejection_sample_ref(target_probs: torch.Tensor, draft_probs: Optional[torch.Tensor],
                         draft_ids: torch.Tensor, starts: list[int], counts: list[int],
                         uniforms: torch.Tensor, noise: torch.Tensor,
                         out: torch.Tensor) -> torch.Tensor:
    """The torch reference of the rule (module docstring); draft_probs None = one-hot drafts.
    Returns `out`, written in place."""
    for start, m in zip(starts, counts):
        stop = start + m - 1  # the bonus slot unless a draft is rejected first
        rejected = False
        for pos in range(start, start + m - 1):
            x = int(draft_ids[pos])
            qx = 1.0 if draft_probs is None else float(draft_probs[pos, x])
            if float(uniforms[pos]) * qx < float(target_probs[pos, x]):
                out[pos] = x
                continue
            stop, rejected = pos, True
            break
        p = target_probs[stop]
        score = p
        if rejected:
            q = (torch.nn.functional.one_hot(draft_ids[stop], p.shape[0]).to(p.dtype)
                 if draft_probs is None else draft_probs[stop])
            residual = (p - q).clamp(min=0)
            # All-zero only by rounding (p == q never rejects): p is then the right law.
            score = residual if bool(residual.max() > 0) else p
        out[stop] = int((score / noise[stop]).argmax())
    return out


def draw_randomness(counts: list[int], vocab: int, generators: list[Optional[torch.Generator]],
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(uniforms [S], Exp(1) noise [S, V]) for rows of `counts` positions: a row with a
    generator (a seeded request) draws all of its numbers from it, in position order, so its
    tokens do not depend on the rows beside it."""
    total = sum(counts)
    uniforms = torch.empty(total, device=device)
    noise = torch.empty(total, vocab, device=device)
    p = 0
    for m, g in zip(counts, generators):
        uniforms[p:p + m].uniform_(generator=g)
        noise[p:p + m].exponential_(generator=g)
        p += m
    return uniforms, noise


@dataclass
class DraftedRows:
    """The verifying rows of a step whose drafts came with their q, in sampled-position terms:
    row i owns the step's sampled positions [firsts[i], firsts[i] + counts[i])."""

    firsts: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    drafts: list[list[int]] = field(default_factory=list)
    draft_probs: list[torch.Tensor] = field(default_factory=list)  # [counts[i] - 1, V] each
    generators: list[Optional[torch.Generator]] = field(default_factory=list)


def resample_drafted(logits: torch.Tensor, tokens: torch.Tensor, sb: SamplingBatch,
                     rows: DraftedRows, stager: Stager) -> None:
    """Overwrite those rows' positions of `tokens` (the target's own samples, [S]) with what
    rejection sampling keeps, so exact match over them (launched_step.accept_drafts) yields the
    kept run. The other rows keep the target's samples: exact match is already the rule for
    their one-hot drafts, and a row's draws never depend on the rows beside it. Its index
    tensors come in one staged copy (stager): a pageable one would wait for the step's forward."""
    dev = logits.device
    positions = [p for f, m in zip(rows.firsts, rows.counts) for p in range(f, f + m)]
    ids: list[int] = []
    starts, p = [], 0
    for m, d in zip(rows.counts, rows.drafts):
        ids += d + [-1]
        starts.append(p)
        p += m
    idx, draft_ids, starts_d, counts_d = stager.stage(
        np.asarray(positions, dtype=np.int64), np.asarray(ids, dtype=np.int64),
        np.asarray(starts, dtype=np.int32), np.asarray(rows.counts, dtype=np.int32))
    pick = lambda t: None if t is None else t.index_select(0, idx)
    target = probabilities(logits.index_select(0, idx), sb.temperatures.index_select(0, idx),
                           pick(sb.top_ks), pick(sb.top_ps))
    draft = torch.zeros_like(target)
    for start, m, q in zip(starts, rows.counts, rows.draft_probs):
        draft[start:start + m - 1] = q
    uniforms, noise = draw_randomness(rows.counts, target.shape[1], rows.generators, dev)
    out = tokens.index_select(0, idx)
    if dev.type == "cuda":
        from atom.kernels.triton.rejection_sampler import rejection_sample  # Triton: CUDA only

        rejection_sample(target, draft, draft_ids, starts_d, counts_d, uniforms, noise, out)
    else:
        rejection_sample_ref(target, draft, draft_ids, starts, rows.counts, uniforms, noise, out)
    tokens.index_copy_(0, idx, out)
