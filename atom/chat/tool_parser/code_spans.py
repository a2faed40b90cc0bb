"""Whether a point of the answer sits inside Markdown code, where a region opener is text.

An answer that shows a call's markup (documentation, an example) writes it in a fenced block or
an inline code span; executing it would run what the model only displayed. The tracker reads the
answer's text outside tool regions once, in order, in pieces of any size, so both delivery modes
see the same state at the same byte.

Fences: a line whose first non-blank characters (at most three spaces in) are three or more
backticks opens a block; a line starting with at least as many closes it. Inline spans: a run of
N backticks opens one, the next run of exactly N closes it; a span ends at the end of its line
too, so one stray backtick in prose cannot disable tool calls for the rest of the answer.
"""
from __future__ import annotations

import re

_TICKS_OR_NEWLINE = re.compile(r"`+|\n")


class CodeSpans:
    def __init__(self) -> None:
        self._fence = 0        # backticks of the open fence, 0 when none
        self._span = 0         # backticks of the open inline span, 0 when none
        self._run = 0          # backticks just read whose run may continue in the next piece
        self._indent = 0       # blanks since the line began (-1: the line has other text)
        self._run_at_start = False

    @property
    def inside(self) -> bool:
        """Inside code at the end of what was fed (a pending backtick run counts as closed:
        the caller asks only where a marker, which never starts with a backtick, begins)."""
        fence, span = self._settled()
        return bool(fence or span)

    def feed(self, text: str) -> None:
        pos = 0
        for m in _TICKS_OR_NEWLINE.finditer(text):
            if m.start() > pos:
                self._end_run()
                self._plain(text[pos:m.start()])
            if m.group() == "\n":
                self._end_run()
                self._span = 0
                self._indent = 0
            else:
                if self._run == 0:
                    self._run_at_start = 0 <= self._indent <= 3
                self._run += len(m.group())
            pos = m.end()
        if pos < len(text):
            self._end_run()
            self._plain(text[pos:])

    def _plain(self, text: str) -> None:
        if self._indent >= 0:
            blanks = len(text) - len(text.lstrip(" "))
            self._indent = self._indent + blanks if blanks == len(text) else -1

    def _end_run(self) -> None:
        if self._run:
            self._fence, self._span = self._settled()
            self._run = 0
            self._indent = -1

    def _settled(self) -> tuple[int, int]:
        """(fence, span) once the pending run of backticks is read."""
        run, fence, span = self._run, self._fence, self._span
        if not run:
            return fence, span
        if fence:
            return (0, 0) if self._run_at_start and run >= fence else (fence, 0)
        if span:
            return (0, 0) if run == span else (0, span)
        if self._run_at_start and run >= 3:
            return run, 0
        return 0, run
