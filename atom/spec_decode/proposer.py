"""The proposer a config asks for, as the engine core uses it: `propose(history, drafted)`.

One seam for both kinds: a core-side proposer (n-gram) computes drafts from the sequence's
history; a runner-side one (mtp, draft_model: atom/spec_decode/drafter.py) has had the runner draft them
after verification, and they arrive with the step's result (`drafted`, None without a drafter).
"""
from __future__ import annotations

from typing import Optional, Protocol, Sequence

from atom.config.schema import SpecDecodeConfig
from atom.spec_decode.acceptance import forced_length
from atom.spec_decode.ngram import NgramProposer


class Proposer(Protocol):
    k: int
    # Whether the runner makes the drafts and keeps them on the device, where a step queued
    # before the one that made them resolves can read them (async scheduling).
    on_device: bool

    def propose(self, history: Sequence[int], drafted: Optional[list[int]]) -> list[int]: ...


class RunnerDrafts:
    """The drafts the runner's drafter made for this sequence in the step just resolved."""

    on_device = True

    def __init__(self, k: int) -> None:
        self.k = k

    def propose(self, history: Sequence[int], drafted: Optional[list[int]]) -> list[int]:
        return list(drafted or ())


class PaddedProposer:
    """Forced acceptance forces only drafts that exist, and n-gram lookup often proposes fewer
    than k (none without a match): padded with the last token, every decoding step verifies k
    drafts, so a benchmark gets the acceptance length it asked for."""

    def __init__(self, inner: Proposer) -> None:
        self.inner = inner
        self.k, self.on_device = inner.k, inner.on_device

    def propose(self, history: Sequence[int], drafted: Optional[list[int]]) -> list[int]:
        drafts = self.inner.propose(history, drafted)
        fill = drafts[-1] if drafts else history[-1]
        return drafts + [fill] * (self.k - len(drafts))


def draft_lookahead(cfg: SpecDecodeConfig) -> int:
    """KV slots past a step's tokens that its drafting writes, in the sequence's blocks: mtp
    and eagle3 run depths 2..k at the k - 1 positions after the last kept token's
    predecessor; a draft model decodes the last kept token and its first k - 1 drafts, k
    positions."""
    if cfg.method in ("mtp", "eagle3"):
        return cfg.num_speculative_tokens - 1
    return cfg.num_speculative_tokens if cfg.method == "draft_model" else 0


def build_proposer(cfg: SpecDecodeConfig) -> Optional[Proposer]:
    """None when speculative decoding is off (validation refuses methods without a proposer)."""
    if cfg.method is None:
        return None
    proposer: Proposer
    if cfg.method == "ngram":
        proposer = NgramProposer(cfg)
    elif cfg.method in ("mtp", "draft_model", "eagle3"):
        proposer = RunnerDrafts(cfg.num_speculative_tokens)
    else:
        raise ValueError(f"specdecode.method={cfg.method!r} has no proposer")
    return PaddedProposer(proposer) if forced_length(cfg) is not None else proposer
