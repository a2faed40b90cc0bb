"""How a verify step decides which drafts stand: exact match, or a forced schedule (benchmarks).

Exact match (`accept_drafts` in runner/launched_step.py) keeps draft j while it equals the
target's own sample after the input before it. Forced acceptance ignores agreement and keeps a
number of drafts drawn from the spec's earliest-positions schedule: a mean acceptance length L
(counting the target's own token) over k slots accepts floor(L - 1) drafts always and one more
with probability frac(L - 1) — the minimum-variance schedule vLLM and SGLang use, so the
distribution of accepted lengths matches theirs and not only its mean. The drafts kept are the
proposer's; the token after them is the target's sample at that position.
"""
from __future__ import annotations

import logging
import math
import random
from typing import Callable, Optional

from atom.config.schema import SpecDecodeConfig

log = logging.getLogger("atom.engine")

# (target samples at every verified position, drafts) → the tokens the sequence keeps
Verifier = Callable[[list[int], list[int]], list[int]]


def forced_length(cfg: SpecDecodeConfig) -> Optional[float]:
    """The mean acceptance length asked for, from either spelling; None when not forced."""
    if cfg.acceptance_length is not None:
        return float(cfg.acceptance_length)
    if cfg.acceptance_rate is not None:
        return 1.0 + float(cfg.acceptance_rate) * cfg.num_speculative_tokens
    return None


def position_schedule(length: float, k: int) -> list[float]:
    """P(draft j is accepted | drafts before it were) for j in 0..k-1: 1 on the first
    floor(length - 1) slots, the fraction on the next, 0 after."""
    accepted = min(max(length - 1.0, 0.0), float(k))
    whole = math.floor(accepted)
    return [1.0 if j < whole else (accepted - whole if j == whole else 0.0) for j in range(k)]


class ForcedAcceptance:
    """A Verifier that keeps drafts by the schedule, not by agreement with the target."""

    def __init__(self, length: float, k: int, seed: int) -> None:
        accepted = min(max(length - 1.0, 0.0), float(k))
        self.whole = math.floor(accepted)
        self.frac = accepted - self.whole
        self._rng = random.Random(seed)  # own stream: request seeds must not move with it

    def draw(self, n_drafts: int) -> int:
        """How many of a row's n_drafts drafts stand: the schedule's draw, no token read."""
        n = self.whole + (1 if self.frac and self._rng.random() < self.frac else 0)
        return min(n, n_drafts)

    def __call__(self, sampled: list[int], drafts: list[int]) -> list[int]:
        n = self.draw(len(drafts))
        return drafts[:n] + [sampled[n]]


def forced_counts(verify: Verifier, n_drafts: list[int]) -> Optional[list[int]]:
    """Per sampling row, the drafts it keeps when the schedule decides: drawn now, in row order
    and only for rows with drafts, the draws a host verify of the same rows makes. None under
    exact match, which only the step's tokens decide."""
    if not isinstance(verify, ForcedAcceptance):
        return None
    return [verify.draw(n) if n else 0 for n in n_drafts]


def build_verifier(cfg: SpecDecodeConfig, seed: int, exact: Verifier) -> Verifier:
    """Exact match unless forced acceptance is configured (then said loudly: the text is noise)."""
    length = forced_length(cfg)
    if cfg.method is None or length is None:
        return exact
    log.warning("FORCED ACCEPTANCE: drafts are accepted with mean acceptance length %.3f "
                "regardless of the target model; generated outputs are MEANINGLESS (benchmark "
                "only, never evaluate accuracy with it)", length)
    return ForcedAcceptance(length, cfg.num_speculative_tokens, seed)
