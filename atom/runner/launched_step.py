"""A step whose forward and sampling are queued on the device, read back only when asked.

The sampled tokens (and logprobs) are copied into pinned host memory asynchronously and an event
marks their arrival, so the host can build and queue the next step before this one has finished;
`result()` waits only for this step's copies, never for work queued after it.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from atom.runner.host_staging import HostRead
from atom.runner.scheduler_output import TokenLogprob


def accept_drafts(sampled: list[int], drafts: list[int]) -> list[int]:
    """The tokens a verify step keeps: position j's sample is the target's own token after the
    j-th input, and draft j stands only if it equals the sample before it. Exact-match
    verification: every kept token is a sample of the target, so the output distribution is the
    target's (rejection sampling keeps more drafts at temperature > 0)."""
    kept = [sampled[0]]
    for j, d in enumerate(drafts):
        if sampled[j] != d:
            break
        kept.append(sampled[j + 1])
    return kept


class LaunchedStep:
    def __init__(self, rows: list[int], tokens: Optional[torch.Tensor],
                 logprob_ks: Optional[list[Optional[int]]] = None,
                 chosen: Optional[torch.Tensor] = None,
                 top: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
                 counts: Optional[list[int]] = None,
                 drafts: Optional[dict[int, list[int]]] = None,
                 verify: Callable[[list[int], list[int]], list[int]] = accept_drafts,
                 accepted: Optional[torch.Tensor] = None,
                 checked: Optional[torch.Tensor] = None) -> None:
        """rows: the batch index of each sampling row; counts: positions each row sampled (None =
        one each); tokens: [positions] on the device (None when no row samples); logprob_ks: per
        row, how many alternatives it asked for (None = none); drafts: per verifying row, the
        draft tokens its positions check; verify: which of them stand (exact match, or the
        forced schedule of atom/spec_decode/acceptance.py); accepted: [rows] the drafts each row
        keeps as the device decided them (spec_decode/verdict.py: a drafting step's, whose
        drafting was queued on them), read with the tokens and ruling in place of verify, with
        checked: [positions] the draft each sampled position checked (-1 at bonus slots), which
        the host may not have had when the step was queued (async scheduling)."""
        self.rows = rows
        self.tokens = tokens
        self.counts = counts
        self.drafts = drafts or {}
        self.verify = verify
        self.logprob_ks = logprob_ks
        self.chosen, self.top = chosen, top  # on the device (DP attention gathers them)
        # Reads the drafts a runner-side drafter made after this step (set by the runner).
        self.read_proposals: Callable[[], dict[int, list[int]]] = dict
        self._result: Optional[tuple[dict[int, list[int]], dict[int, list[TokenLogprob]]]] = None
        shown = [t for t in (tokens, chosen, *(top or ())) if t is not None]
        self._shown = len(shown)  # the copies after them: accepted and checked, when given
        self._copies = HostRead(shown + ([] if accepted is None else [accepted, checked]))
        self._accepted: Optional[torch.Tensor] = None
        self._checked: Optional[torch.Tensor] = None

    @property
    def proposals(self) -> dict[int, list[int]]:
        """Batch index → the drafts a runner-side drafter made after this step (MTP, EAGLE-3,
        a draft model); waits for the drafting, so read after result()."""
        return self.read_proposals()

    def launch_failure(self) -> Optional[Exception]:
        """None: a launch in this process that raised raised in the call."""
        return None

    def result(self) -> tuple[dict[int, list[int]], dict[int, list[TokenLogprob]]]:
        """(batch index → the tokens it keeps, batch index → their logprob records); waits for
        this step. Read once: the forced schedule must not be drawn twice for one step."""
        if self._result is None:
            self._result = self._read()
        return self._result

    def _read(self) -> tuple[dict[int, list[int]], dict[int, list[TokenLogprob]]]:
        if self.tokens is None:
            return {}, {}
        copies = self._copies.wait()
        host = copies[:self._shown]
        if len(copies) > self._shown:
            self._accepted, self._checked = copies[self._shown:]
        token_list = host[0].tolist()
        if self.counts is None and self.logprob_ks is None:  # the plain step: one token a row
            return {row: [tok] for row, tok in zip(self.rows, token_list)}, {}
        spans = self._spans(token_list)
        sampled = {row: kept for row, _, kept in spans}
        logprobs: dict[int, list[TokenLogprob]] = {}
        if self.logprob_ks is not None:
            chosen = host[1].tolist()
            top_vals, top_ids = (host[2].tolist(), host[3].tolist()) if len(host) > 2 else ([], [])
            for (row, p, kept), k in zip(spans, self.logprob_ks):
                if k is None:
                    continue
                logprobs[row] = [TokenLogprob(tok, float(chosen[q]),
                                              list(zip(top_ids[q][:k], top_vals[q][:k]))
                                              if top_vals else [])
                                 for q, tok in enumerate(kept, start=p)]
        return sampled, logprobs

    def _spans(self, token_list: list[int]) -> list[tuple[int, int, list[int]]]:
        """(row, first position, tokens kept) per sampling row; a verifying row keeps what its
        verifier lets stand: its accepted drafts and the target's token after them."""
        if self.counts is None:
            return [(row, r, token_list[r:r + 1]) for r, row in enumerate(self.rows)]
        accepted = None if self._accepted is None else self._accepted.tolist()
        checked = None if self._checked is None else self._checked.tolist()
        spans, p = [], 0
        for r, (row, m) in enumerate(zip(self.rows, self.counts)):
            d = self.drafts.get(row)
            if accepted is not None:
                assert checked is not None  # given with accepted
                n = accepted[r]
                kept = checked[p:p + n] + [token_list[p + n]]
            elif not d:
                kept = token_list[p:p + m]
            else:
                kept = self.verify(token_list[p:p + m], d)
            spans.append((row, p, kept))
            p += m
        return spans
