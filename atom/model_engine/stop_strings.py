"""Stop-string matching over streamed text, robust to a stop string split across tokens.

One Aho–Corasick automaton per request: each character of output costs one (amortised) transition
however many stop strings there are, where a search per stop string made one request with
thousands of them slow the reader thread every stream shares.
"""
from __future__ import annotations

from collections import deque


class StopAutomaton:
    """The stop strings' trie with failure links.

    `depth[s]` is the length of the text suffix state `s` stands for (the longest suffix that
    is a prefix of some stop string: the part that must be withheld); `hit[s]` the length of
    the longest stop string ending there (0: none), so a match's start is known at its end.
    """

    __slots__ = ("goto", "fail", "depth", "hit")

    def __init__(self, stops: list[str]) -> None:
        self.goto: list[dict[str, int]] = [{}]
        self.depth = [0]
        self.hit = [0]
        for stop in stops:
            self._insert(stop)
        self.fail = [0] * len(self.goto)
        self._link()

    def _insert(self, stop: str) -> None:
        state = 0
        for ch in stop:
            nxt = self.goto[state].get(ch)
            if nxt is None:
                nxt = len(self.goto)
                self.goto[state][ch] = nxt
                self.goto.append({})
                self.depth.append(self.depth[state] + 1)
                self.hit.append(0)
            state = nxt
        self.hit[state] = len(stop)

    def _link(self) -> None:
        queue = deque(self.goto[0].values())
        while queue:
            state = queue.popleft()
            for ch, nxt in self.goto[state].items():
                f = self.fail[state]
                while f and ch not in self.goto[f]:
                    f = self.fail[f]
                self.fail[nxt] = self.goto[f].get(ch, 0)
                self.hit[nxt] = max(self.hit[nxt], self.hit[self.fail[nxt]])
                queue.append(nxt)

    def step(self, state: int, ch: str) -> int:
        goto, fail = self.goto, self.fail
        while state and ch not in goto[state]:
            state = fail[state]
        return goto[state].get(ch, 0)


class StopStringMatcher:
    """Feeds text deltas; stops the output where the first stop string to complete begins
    (or ends, with `include_stop`).

    Text that could still be the start of a stop string is withheld from `releasable` so a
    streaming client never sees half of a stop string that later matches.
    """

    def __init__(self, stops: list[str] | None, include_stop: bool = False) -> None:
        stops = [s for s in (stops or []) if s]
        self._ac = StopAutomaton(stops) if stops else None
        self._include = include_stop
        self._state = 0
        self.text = ""
        self.stopped = False

    def feed(self, delta: str) -> None:
        if self.stopped or not delta:
            return
        base = len(self.text)
        self.text += delta
        ac = self._ac
        if ac is None:
            return
        state, hit = self._state, ac.hit
        for i, ch in enumerate(delta):
            state = ac.step(state, ch)
            if hit[state]:
                end = base + i + 1
                self.text = self.text[: end if self._include else end - hit[state]]
                self.stopped = True
                return
        self._state = state

    def releasable(self, final: bool) -> int:
        """How many characters of `text` are safe to hand out now."""
        if final or self.stopped or self._ac is None:
            return len(self.text)
        return len(self.text) - self._ac.depth[self._state]
