"""A step whose forward and sampling are queued on the device, read back only when asked.

The sampled tokens (and logprobs) are copied into pinned host memory asynchronously and an event
marks their arrival, so the host can build and queue the next step before this one has finished;
`result()` waits only for this step's copies, never for work queued after it.
"""
from __future__ import annotations

from typing import Optional

import torch

from atom.model_engine.messages import TokenLogprob


def _to_host(t: torch.Tensor) -> torch.Tensor:
    if not t.is_cuda:
        return t
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)


class LaunchedStep:
    def __init__(self, rows: list[int], tokens: Optional[torch.Tensor],
                 logprob_ks: Optional[list[Optional[int]]] = None,
                 chosen: Optional[torch.Tensor] = None,
                 top: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> None:
        """rows: the batch index of each sampled row; tokens: [R] on the device (None when no
        row samples); logprob_ks: per row, how many alternatives it asked for (None = none)."""
        self.rows = rows
        self.tokens = tokens
        self.logprob_ks = logprob_ks
        self._host = [_to_host(t) for t in (tokens, chosen, *(top or ())) if t is not None]
        self._event: Optional[torch.cuda.Event] = None
        if tokens is not None and tokens.is_cuda:
            self._event = torch.cuda.Event()
            self._event.record()

    def result(self) -> tuple[dict[int, list[int]], dict[int, TokenLogprob]]:
        """(batch index → sampled tokens, batch index → logprob record); waits for this step."""
        if self.tokens is None:
            return {}, {}
        if self._event is not None:
            self._event.synchronize()
        host = self._host
        token_list = host[0].tolist()
        sampled = {row: [tok] for row, tok in zip(self.rows, token_list)}
        logprobs: dict[int, TokenLogprob] = {}
        if self.logprob_ks is not None:
            chosen = host[1].tolist()
            top_vals, top_ids = (host[2].tolist(), host[3].tolist()) if len(host) > 2 else ([], [])
            for r, (row, k) in enumerate(zip(self.rows, self.logprob_ks)):
                if k is None:
                    continue
                alts = list(zip(top_ids[r][:k], top_vals[r][:k])) if top_vals else []
                logprobs[row] = TokenLogprob(token_list[r], float(chosen[r]), alts)
        return sampled, logprobs
