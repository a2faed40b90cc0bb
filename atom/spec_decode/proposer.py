"""The proposer a config asks for, as the engine core uses it: `propose(history) -> drafts`."""
from __future__ import annotations

from typing import Optional, Protocol, Sequence

from atom.config.schema import SpecDecodeConfig
from atom.spec_decode.acceptance import forced_length
from atom.spec_decode.ngram import NgramProposer


class Proposer(Protocol):
    k: int

    def propose(self, history: Sequence[int]) -> list[int]: ...


class PaddedProposer:
    """Forced acceptance forces only drafts that exist, and n-gram lookup often proposes fewer
    than k (none without a match): padded with the last token, every decoding step verifies k
    drafts, so a benchmark gets the acceptance length it asked for."""

    def __init__(self, inner: Proposer) -> None:
        self.inner = inner
        self.k = inner.k

    def propose(self, history: Sequence[int]) -> list[int]:
        drafts = self.inner.propose(history)
        fill = drafts[-1] if drafts else history[-1]
        return drafts + [fill] * (self.k - len(drafts))


def build_proposer(cfg: SpecDecodeConfig) -> Optional[Proposer]:
    """None when speculative decoding is off (validation refuses methods without a proposer)."""
    if cfg.method is None:
        return None
    if cfg.method != "ngram":
        raise ValueError(f"specdecode.method={cfg.method!r} has no proposer")
    proposer: Proposer = NgramProposer(cfg)
    return PaddedProposer(proposer) if forced_length(cfg) is not None else proposer
