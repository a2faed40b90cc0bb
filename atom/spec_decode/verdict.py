"""A verify step's outcome decided on the device, so that a runner-side drafter can queue its
drafting right behind the step, before the host has read one of its tokens.

Sampling row r owns the step's sampled positions [f_r, f_r + m_r); the first m_r - 1 carry its
drafts d_0.., the last is the bonus slot. It keeps n_r drafts: under exact match the leading
run of j with d_j equal to the target's sample at j (the rejection sampler has already
rewritten the samples of rows whose drafts came with a q, so exact match rules them too: see
rejection.py); under forced acceptance (acceptance.py) n_r is drawn on the host, from no
token. The token kept after input j is then d_j for j < n_r and the sample at n_r from there on
(past a rejection, the last kept token): what a drafter's catch-up reads at the row's sampled
positions. The host reads n with the step's tokens (LaunchedStep) and keeps d[:n] plus the
sample at n, the run accept_drafts or the forced schedule gives.

The drafts are read from the step's own inputs on the device (the input after sampled position
j < m - 1 is d_j), so a step whose drafts the host has not read yet (async scheduling: the
drafter's output of the step before, runner/model_runner.py) is judged the same way; they go
back to the host with the tokens (`Verdict.drafts`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from atom.spec_decode.draft_plan import Stager


@dataclass
class Verdict:
    accepted: torch.Tensor  # [R] int64, the drafts each sampling row keeps
    kept: torch.Tensor  # [S] int64, per sampled position the token kept after its input
    last: torch.Tensor  # [R] int64, each row's last kept token (its sample at n)
    drafts: torch.Tensor  # [S] int64, per sampled position the draft it checks, -1 at bonus slots


def judge(tokens: torch.Tensor, counts: Sequence[int], input_ids: torch.Tensor,
          logits_idx: torch.Tensor, forced: Optional[Sequence[int]], stager: Stager) -> Verdict:
    """tokens: [S] the step's samples (after rejection sampling); counts: sampled positions per
    row; input_ids, logits_idx: the step's inputs and each sampled position's token index (the
    drafts are the inputs after them); forced: per row the drafts it keeps, drawn on the host
    (None: exact match decides). Its host arrays go in one staged copy."""
    m = np.asarray(counts, dtype=np.int64)
    total, rows = int(m.sum()), len(counts)
    firsts = np.cumsum(m) - m
    j = np.arange(total, dtype=np.int64) - np.repeat(firsts, m)
    host = [np.repeat(np.arange(rows, dtype=np.int64), m), j,
            (j < np.repeat(m, m) - 1).astype(np.int64), firsts]
    if forced is not None:
        host.append(np.asarray(forced, dtype=np.int64))
    row_of, j_of, is_draft, firsts_d, *forced_d = stager.stage(*host)
    after = (logits_idx + 1).clamp(max=input_ids.shape[0] - 1)
    # the bonus slots' -1 matches no sample
    draft_d = torch.where(is_draft.bool(), input_ids.index_select(0, after), -1)
    if forced_d:
        accepted = forced_d[0]
    else:
        misses = torch.where(tokens != draft_d, j_of, total)
        accepted = torch.full((rows,), total, dtype=torch.int64, device=tokens.device
                              ).scatter_reduce_(0, row_of, misses, "amin")
    last = tokens.index_select(0, firsts_d + accepted)
    kept = torch.where(j_of < accepted.index_select(0, row_of), draft_d,
                       last.index_select(0, row_of))
    return Verdict(accepted, kept, last, draft_d)
