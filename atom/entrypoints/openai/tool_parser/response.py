"""One response, both stages: the reasoning split first, then the tool-call reader on the answer.

Separation is unconditional: a chain of thought left in the text is one the tool parser would
read as calls. The server makes one `ResponseReader` per choice and feeds it text deltas.
"""
from __future__ import annotations

from typing import Callable, Optional

from atom.entrypoints.openai.reasoning import ReasoningChannel
from atom.entrypoints.openai.tool_parser.events import ContentDelta, Event, ReasoningDelta
from atom.entrypoints.openai.tool_parser.policy import ToolPolicy
from atom.entrypoints.openai.tool_parser.region import ToolFormat
from atom.entrypoints.openai.tool_parser.stream import ToolCallStream, new_call_id


class ResponseReader:
    def __init__(self, channel: ReasoningChannel, fmt: Optional[type[ToolFormat]],
                 policy: Optional[ToolPolicy] = None,
                 new_id: Callable[[], str] = new_call_id) -> None:
        self._reasoning = channel.stream()
        self._tools = ToolCallStream(fmt, policy, new_id) if fmt is not None else None

    @property
    def tools(self) -> Optional[ToolCallStream]:
        return self._tools

    def feed(self, text: str) -> list[Event]:
        return self._route(self._reasoning.feed(text), final=False)

    def finish(self) -> list[Event]:
        return self._route(self._reasoning.finish(), final=True)

    def _route(self, pieces, final: bool) -> list[Event]:
        out: list[Event] = []
        for piece in pieces:
            if piece.reasoning:
                out.append(ReasoningDelta(piece.text))
            elif self._tools is None:
                out.append(ContentDelta(piece.text))
            else:
                out.extend(self._tools.feed(piece.text))
        if final and self._tools is not None:
            out.extend(self._tools.finish())
        return out


def read_response(channel: ReasoningChannel, fmt: Optional[type[ToolFormat]], text: str,
                  policy: Optional[ToolPolicy] = None,
                  new_id: Callable[[], str] = new_call_id) -> list[Event]:
    """stream=false: the same reader over a single chunk."""
    reader = ResponseReader(channel, fmt, policy, new_id)
    return reader.feed(text) + reader.finish()
