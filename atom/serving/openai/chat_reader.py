"""The seam between generated text and chat deltas: a per-request "text → events" stage.

The chat handler feeds every text delta of one choice through a `ChatTextReader` and sends what it
returns; the default (tool_parser/chat_io.py) splits reasoning and reads tool calls, and
`create_app` takes another `ChatReaderFactory`. Non-streaming responses run the same
reader over the whole text (one `feed`, then `finish`), so both delivery modes share one reading.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol

from atom.serving.openai.protocol import (ChatCompletionRequest, DeltaMessage, ToolCall,
                                              ToolCallFunction)


class ChatTextReader(Protocol):
    def feed(self, text: str) -> Optional[DeltaMessage]:
        """Consume a text delta; return what may be released now (None: nothing yet)."""

    def finish(self) -> Optional[DeltaMessage]:
        """End of the choice's text: release everything still held."""

    @property
    def finish_reason(self) -> Optional[str]:
        """An override of the engine's finish reason (e.g. "tool_calls"), or None."""


ChatReaderFactory = Callable[[ChatCompletionRequest], ChatTextReader]


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
