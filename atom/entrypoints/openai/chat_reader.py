"""The seam between generated text and chat deltas: a per-request "text → events" stage.

The chat handler feeds every text delta of one choice through a `ChatTextReader` and sends what it
returns. The default passes content through untouched; the reasoning split and the tool-call reader
plug in by supplying a `ChatReaderFactory` to `create_app`. Non-streaming responses run the same
reader over the whole text (one `feed`, then `finish`), so both delivery modes share one reading.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol

from atom.entrypoints.openai.protocol import ChatCompletionRequest, DeltaMessage


class ChatTextReader(Protocol):
    def feed(self, text: str) -> Optional[DeltaMessage]:
        """Consume a text delta; return what may be released now (None: nothing yet)."""

    def finish(self) -> Optional[DeltaMessage]:
        """End of the choice's text: release everything still held."""

    @property
    def finish_reason(self) -> Optional[str]:
        """An override of the engine's finish reason (e.g. "tool_calls"), or None."""


ChatReaderFactory = Callable[[ChatCompletionRequest], ChatTextReader]


class PassthroughReader:
    """Everything is content, released as it arrives."""

    finish_reason: Optional[str] = None

    def feed(self, text: str) -> Optional[DeltaMessage]:
        return DeltaMessage(content=text) if text else None

    def finish(self) -> Optional[DeltaMessage]:
        return None


def passthrough_factory(_: ChatCompletionRequest) -> ChatTextReader:
    return PassthroughReader()


def merge_deltas(a: Optional[DeltaMessage], b: Optional[DeltaMessage]) -> Optional[DeltaMessage]:
    if a is None:
        return b
    if b is None:
        return a

    def cat(x: Optional[str], y: Optional[str]) -> Optional[str]:
        return y if x is None else x if y is None else x + y

    calls = (a.tool_calls or []) + (b.tool_calls or [])
    return DeltaMessage(role=a.role or b.role, content=cat(a.content, b.content),
                        reasoning_content=cat(a.reasoning_content, b.reasoning_content),
                        tool_calls=calls or None)
