"""The reader's events as OpenAI chat deltas: one `DeltaReader` per choice.

The chat handler feeds every text delta of one choice through it and sends what it returns; a
non-streaming response runs the same reader over the whole text (one `feed`, then `finish`), so
both delivery modes share one reading.
"""
from __future__ import annotations

from typing import Optional

from atom.chat.reader import ResponseReader
from atom.chat.tool_parser.events import ContentDelta, Event, ReasoningDelta, ToolCallArgs, ToolCallStart
from atom.serving.openai.protocol import DeltaMessage, ToolCall, ToolCallFunction


class DeltaReader:
    """One choice's `ResponseReader`, its events turned into `DeltaMessage`s."""

    def __init__(self, reader: ResponseReader) -> None:
        self._reader = reader
        self.finish_reason: Optional[str] = None  # "tool_calls" once a call closed

    def feed(self, text: str) -> Optional[DeltaMessage]:
        """What may be released now (None: nothing yet)."""
        return self._delta(self._reader.feed(text))

    def finish(self) -> Optional[DeltaMessage]:
        """End of the choice's text: everything still held."""
        return self._delta(self._reader.finish())

    def _delta(self, events: list[Event]) -> Optional[DeltaMessage]:
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        calls: dict[int, ToolCall] = {}
        for e in events:
            if isinstance(e, ToolCallStart):
                calls[e.index] = ToolCall(id=e.id, type="function", index=e.index,
                                          function=ToolCallFunction(name=e.name, arguments=""))
            elif isinstance(e, ToolCallArgs):
                self.finish_reason = "tool_calls"
                prev = calls.get(e.index)
                fn = ToolCallFunction(name=prev.function.name if prev and prev.function else None,
                                      arguments=e.arguments)
                calls[e.index] = ToolCall(id=prev.id if prev else None,
                                          type="function" if prev else None, index=e.index,
                                          function=fn)
        if not (content or reasoning or calls):
            return None
        return DeltaMessage(content=content or None, reasoning_content=reasoning or None,
                            tool_calls=[calls[i] for i in sorted(calls)] or None)


def merge_deltas(a: Optional[DeltaMessage], b: Optional[DeltaMessage]) -> Optional[DeltaMessage]:
    if a is None:
        return b
    if b is None:
        return a

    def cat(x: Optional[str], y: Optional[str]) -> Optional[str]:
        return y if x is None else x if y is None else x + y

    calls = _merge_calls((a.tool_calls or []) + (b.tool_calls or []))
    return DeltaMessage(role=a.role or b.role, content=cat(a.content, b.content),
                        reasoning_content=cat(a.reasoning_content, b.reasoning_content),
                        tool_calls=calls or None)


def _merge_calls(calls: list[ToolCall]) -> list[ToolCall]:
    """Fragments of one call (name early, arguments later) become one entry, as a client that
    accumulates by index would see them; a non-streaming message must carry whole calls."""
    merged: dict[int, ToolCall] = {}
    loose: list[ToolCall] = []
    for c in calls:
        if c.index is None:
            loose.append(c)
            continue
        prev = merged.get(c.index)
        if prev is None:
            merged[c.index] = c
            continue
        pf, cf = prev.function or ToolCallFunction(), c.function or ToolCallFunction()
        args = None if pf.arguments is None and cf.arguments is None else \
            (pf.arguments or "") + (cf.arguments or "")
        merged[c.index] = ToolCall(id=prev.id or c.id, type=prev.type or c.type, index=c.index,
                                   function=ToolCallFunction(name=pf.name or cf.name,
                                                             arguments=args))
    return [merged[i] for i in sorted(merged)] + loose
