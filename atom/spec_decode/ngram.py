"""Prompt-lookup (n-gram) proposer: drafts copied from the sequence's own history.

The last n tokens (n from prompt_lookup_max down to prompt_lookup_min) are looked up in the
earlier history; the k tokens that followed their most recent earlier occurrence are the drafts.
No weights: repetitive text (code edits, quoting the prompt) is where it pays. Verified by exact
match (runner/launched_step.py), so the output is the target's whatever it proposes.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from atom.config.schema import SpecDecodeConfig

# One lookup scans at most this many trailing tokens of the history, so a step's proposals cost
# O(batch · window · n) whatever the context length (a 128k-token history would otherwise cost
# milliseconds per sequence per step in Python).
MAX_LOOKBACK = 4096


def propose_ngram(history: Sequence[int], k: int, n_min: int, n_max: int,
                  lookback: int = MAX_LOOKBACK) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the history's longest
    matching suffix (n_max down to n_min tokens); fewer at the end of the history, [] when no
    suffix recurs within the last `lookback` tokens. The window is compared as arrays (n
    vector compares per n): a Python scan of a 4,096-token window costs about a millisecond,
    which a 256-sequence batch pays every step."""
    window = np.asarray(history[-lookback:], dtype=np.int64)
    size = window.size
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        starts = size - n  # candidate starts 0 .. size - n - 1: strictly before the suffix
        hit = window[:starts] == window[starts]
        for j in range(1, n):
            hit &= window[j:starts + j] == window[starts + j]
        found = np.flatnonzero(hit)
        if found.size:
            first = int(found[-1]) + n  # the latest occurrence: the best guess of what follows
            return window[first:first + k].tolist()
    return []


class NgramProposer:
    on_device = False  # it reads each sequence's host history (proposer.Proposer)
    """`propose(history)` → drafts for one decoding sequence, from the specdecode config (core
    side: `drafted`, a runner drafter's output, is never set for it)."""

    def __init__(self, cfg: SpecDecodeConfig) -> None:
        self.k = cfg.num_speculative_tokens
        self.n_min = cfg.prompt_lookup_min
        self.n_max = cfg.prompt_lookup_max

    def propose(self, history: Sequence[int], drafted: Optional[list[int]] = None) -> list[int]:
        return propose_ngram(history, self.k, self.n_min, self.n_max)
