"""How much of a stream is safe to release, the one rule every read-ahead stage uses.

A stage that looks for markers (reasoning delimiters, tool-call openers) may not hand out a byte
that could still turn out to be the first character of one. Holding "everything once a marker's
first character appears" is unbounded (one ``<`` in prose holds the whole answer) and makes the
scan quadratic; holding only the longest suffix that is a proper prefix of some marker bounds the
wait by the longest marker, and is usually zero.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True, slots=True)
class MarkerHit:
    """A complete marker found at `pos` in the scanned text."""

    pos: int
    marker: str

    @property
    def end(self) -> int:
        return self.pos + len(self.marker)


class MarkerScanner:
    """Finds markers in a buffer and says how much of the buffer is safe to release."""

    def __init__(self, markers: Iterable[str]) -> None:
        ordered = sorted({m for m in markers if m}, key=len, reverse=True)
        self.markers: tuple[str, ...] = tuple(ordered)
        self.longest: int = len(ordered[0]) if ordered else 0
        self._prefixes: frozenset[str] = frozenset(
            m[:k] for m in ordered for k in range(1, len(m)))
        self._firsts: tuple[str, ...] = tuple({m[0] for m in ordered})
        # Longest first, so at one position the alternation prefers the longest marker.
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def held_suffix(self, buf: str) -> int:
        """Length of the longest suffix of `buf` that is a proper prefix of some marker.

        Only positions holding a marker's first character can start one, so those are found
        with str.find rather than trying every suffix length.
        """
        n = len(buf)
        start = max(0, n - self.longest + 1)
        best = n
        for first in self._firsts:
            p = buf.find(first, start)
            while 0 <= p < best:
                if buf[p:] in self._prefixes:
                    best = p
                    break
                p = buf.find(first, p + 1)
        return n - best

    def safe_len(self, buf: str) -> int:
        """How many leading characters of `buf` can be released now; the rest must wait.

        The held part is always shorter than the longest marker, which is the bound the
        streaming path promises.
        """
        held = self.held_suffix(buf)
        assert held < max(self.longest, 1), "marker hold exceeded the longest marker"
        return len(buf) - held

    def find(self, buf: str, start: int = 0) -> Optional[MarkerHit]:
        """The earliest complete marker in `buf[start:]` that no longer marker could still claim.

        At one position the longest complete marker wins. A hit whose text is also a proper
        prefix of a longer marker not yet decidable (the buffer ends first) is not reported:
        the caller holds it, exactly as it holds any other marker prefix.
        """
        if self._pattern is None:
            return None
        match = self._pattern.search(buf, start)
        if match is None:
            return None
        best = MarkerHit(match.start(), match.group())
        tail = buf[best.pos:]
        if any(len(m) > len(tail) and m.startswith(tail) for m in self.markers):
            return None
        return best
