"""Splits the reasoning channel from the answer.

`ReasoningChannel` carries the model's dialect and whether this request's output begins inside
the channel, and has one accessor per delivery mode (`stream()` and `split()`), so the two modes
cannot be handed different answers: `split` is the streaming splitter over a single chunk.

Rules: the end marker is matched wherever it appears (not only at position 0), a later opening
marker opens a new block, and nothing is stripped: whitespace around a marker is content.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from atom.chat.marker_scanner import MarkerScanner
from atom.chat.reasoning_dialects import ReasoningDialect


@dataclass(frozen=True, slots=True)
class ReasoningPiece:
    """A run of text and where it goes: reasoning_content (True) or the answer (False)."""

    text: str
    reasoning: bool


@dataclass(frozen=True, slots=True)
class ReasoningChannel:
    """The per-request reading of the reasoning channel."""

    dialect: ReasoningDialect
    begins_inside: bool

    @classmethod
    def for_request(cls, dialect: ReasoningDialect, generation: Optional[str],
                    thinking_off: Optional[bool] = None,
                    opens_by_default: bool = False) -> "ReasoningChannel":
        """Decide from the request's generation prompt (`reasoning_dialects.generation_part`)
        whether the output starts inside the channel.

        Per request, not per model: a request that switched thinking off renders a generation
        prompt that closes the channel. Only where it is silent does the model's default apply
        (`implicit_open`, or `opens_by_default`: the template's own generation prompt opens the
        channel), and not for a request that asked for no thinking.
        """
        state = dialect.prompt_state(generation) if generation is not None else None
        if state is None:
            state = (dialect.implicit_open or opens_by_default) and thinking_off is not True
        return cls(dialect, bool(state))

    def stream(self) -> "ReasoningSplitter":
        return ReasoningSplitter(self.dialect, self.begins_inside)

    def split(self, text: str) -> tuple[str, str]:
        """(reasoning, content) of a whole response: the streaming splitter over one chunk."""
        splitter = self.stream()
        pieces = splitter.feed(text) + splitter.finish()
        reasoning = "".join(p.text for p in pieces if p.reasoning)
        content = "".join(p.text for p in pieces if not p.reasoning)
        return reasoning, content


class ReasoningSplitter:
    """Streaming split of one response into reasoning and answer pieces."""

    def __init__(self, dialect: ReasoningDialect, begins_inside: bool) -> None:
        self._dialect = dialect
        self._inside = begins_inside and bool(dialect.start)
        self._scanner = MarkerScanner(dialect.markers)
        self._buf = ""

    @property
    def inside(self) -> bool:
        return self._inside

    @property
    def held(self) -> int:
        return len(self._buf)

    def feed(self, text: str) -> list[ReasoningPiece]:
        if not self._dialect.start:
            return [ReasoningPiece(text, False)] if text else []
        buf = self._buf + text
        out: list[ReasoningPiece] = []
        while True:
            hit = self._scanner.find(buf)
            if hit is None:
                break
            self._emit(out, buf[:hit.pos])
            # `</think>` outside a block and `<think>` inside one are markup all the same.
            self._inside = hit.marker == self._dialect.start
            buf = buf[hit.end:]
        safe = self._scanner.safe_len(buf)
        self._emit(out, buf[:safe])
        self._buf = buf[safe:]
        return out

    def flush(self) -> list[ReasoningPiece]:
        """Release the held marker prefix in the current channel: what follows cannot complete
        it (a tool-call region starts there), so it is text of the channel it was written in."""
        out: list[ReasoningPiece] = []
        self._emit(out, self._buf)
        self._buf = ""
        return out

    def leave(self) -> None:
        """A tool call started: the channel ends there, as it would at its end marker."""
        self._inside = False

    def finish(self) -> list[ReasoningPiece]:
        return self.flush()

    def _emit(self, out: list[ReasoningPiece], text: str) -> None:
        if not text:
            return
        if out and out[-1].reasoning == self._inside:
            out[-1] = ReasoningPiece(out[-1].text + text, self._inside)
        else:
            out.append(ReasoningPiece(text, self._inside))
