"""Speculative-decoding statistics: counted in the engine core, read as the spec names them.

The counters live in EngineStats (model_engine/messages.py: they cross to the API process
with every step); this module adds to them, logs them every LOG_EVERY draft tokens, and turns
them into the spec's `print_mtp_statistics()` text and the `/debug/mtp_stats` JSON. It names
them by `SpecCounters`, which EngineStats satisfies: speculation sits below the engine core,
which owns the stats message.
"""
from __future__ import annotations

import logging
from typing import Any, Protocol


class SpecCounters(Protocol):
    """The speculative-decoding counters of model_engine.messages.EngineStats."""

    spec_num_speculative_tokens: int
    spec_draft_tokens: int
    spec_accepted_tokens: int
    spec_verify_forwards: int
    spec_drafts_per_position: list[int]
    spec_accepted_per_position: list[int]


log = logging.getLogger("atom.engine")

LOG_EVERY = 1000  # draft tokens between two statistics log lines (the spec's figure)


class SpecDecodeRecorder:
    """Adds one verify step's outcome per sequence to the core's EngineStats."""

    def __init__(self, stats: SpecCounters, k: int) -> None:
        self.stats = stats
        stats.spec_num_speculative_tokens = k
        stats.spec_drafts_per_position = [0] * k
        stats.spec_accepted_per_position = [0] * k
        self._next_log = LOG_EVERY

    def record(self, num_drafts: int, num_accepted: int) -> None:
        """One sequence verified num_drafts drafts and kept the first num_accepted of them."""
        s = self.stats
        s.spec_draft_tokens += num_drafts
        s.spec_accepted_tokens += num_accepted
        s.spec_verify_forwards += 1
        for j in range(num_drafts):
            s.spec_drafts_per_position[j] += 1
        for j in range(num_accepted):
            s.spec_accepted_per_position[j] += 1
        if s.spec_draft_tokens >= self._next_log:
            self._next_log = (s.spec_draft_tokens // LOG_EVERY + 1) * LOG_EVERY
            log.info("spec decode: %d draft tokens, %d accepted (%.2f%%), %.3f tokens per "
                     "forward, per position %s", s.spec_draft_tokens, s.spec_accepted_tokens,
                     100 * acceptance_rate(s), average_tokens_per_forward(s),
                     " ".join(f"{r:.2f}" for r in per_position_acceptance(s)))


def acceptance_rate(s: SpecCounters) -> float:
    return s.spec_accepted_tokens / s.spec_draft_tokens if s.spec_draft_tokens else 0.0


def average_tokens_per_forward(s: SpecCounters) -> float:
    """Tokens a sequence got per verify forward: its own token plus the drafts it kept."""
    if not s.spec_verify_forwards:
        return 0.0
    return 1.0 + s.spec_accepted_tokens / s.spec_verify_forwards


def per_position_acceptance(s: SpecCounters) -> list[float]:
    """Of the drafts proposed at slot j, the share accepted (a draft stands only if all before
    it did, so this falls with j)."""
    return [a / d if d else 0.0
            for a, d in zip(s.spec_accepted_per_position, s.spec_drafts_per_position)]


def mtp_statistics_text(s: SpecCounters) -> str:
    """The spec's `print_mtp_statistics()` block."""
    if not s.spec_num_speculative_tokens:
        return "MTP Statistics: speculative decoding is off"
    return "\n".join([
        "MTP Statistics:",
        f"  Total draft tokens: {s.spec_draft_tokens}",
        f"  Accepted tokens:    {s.spec_accepted_tokens}",
        f"  Acceptance rate:    {100.0 * acceptance_rate(s):.2f}%",
        f"  Average tokens per forward: {average_tokens_per_forward(s):.3f}",
        "  Per-position acceptance: "
        + " ".join(f"{100 * r:.2f}%" for r in per_position_acceptance(s))])


def mtp_stats_json(s: SpecCounters, method: Any) -> dict[str, Any]:
    """`/debug/mtp_stats`: the spec's counters, cumulative since start-up (a benchmark reads
    them before and after its run and takes the difference)."""
    enabled = bool(s.spec_num_speculative_tokens)
    return {
        "enabled": enabled, "method": method,
        "num_speculative_tokens": s.spec_num_speculative_tokens,
        "total_draft_tokens": s.spec_draft_tokens,
        "total_accepted_tokens": s.spec_accepted_tokens,
        "acceptance_rate": acceptance_rate(s),
        "total_forwards": s.spec_verify_forwards,
        "average_tokens_per_forward": average_tokens_per_forward(s),
        "per_position_acceptance": per_position_acceptance(s),
    }
