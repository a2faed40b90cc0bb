"""Stop-string matching over streamed text, robust to a stop string split across tokens."""
from __future__ import annotations


class StopStringMatcher:
    """Feeds text deltas; reports where the first stop string ends the output.

    Text that could still be the start of a stop string is withheld from `releasable` so a
    streaming client never sees half of a stop string that later matches.
    """

    def __init__(self, stops: list[str] | None, include_stop: bool = False) -> None:
        self._stops = [s for s in (stops or []) if s]
        self._include = include_stop
        self._longest = max((len(s) for s in self._stops), default=0)
        self.text = ""
        self.stopped = False

    def feed(self, delta: str) -> None:
        if self.stopped or not delta:
            return
        start = max(0, len(self.text) - self._longest + 1)
        self.text += delta
        if not self._stops:
            return
        hit = self._first_hit(start)
        if hit is not None:
            pos, stop = hit
            self.text = self.text[: pos + (len(stop) if self._include else 0)]
            self.stopped = True

    def _first_hit(self, start: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for s in self._stops:
            p = self.text.find(s, start)
            if p != -1 and (best is None or p < best[0]):
                best = (p, s)
        return best

    def releasable(self, final: bool) -> int:
        """How many characters of `text` are safe to hand out now."""
        if final or self.stopped or not self._stops:
            return len(self.text)
        for k in range(min(self._longest - 1, len(self.text)), 0, -1):
            tail = self.text[-k:]
            if any(s.startswith(tail) for s in self._stops):
                return len(self.text) - k
        return len(self.text)
