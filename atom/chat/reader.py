"""One response, both stages: the tool-call reader reads the raw text, and what it leaves outside
its regions is split into reasoning and answer.

Tool regions are found first because a region is the model's markup wherever it stands: a call
begun before the thinking block closed (Kimi's `<think>…<|tool_calls_section_begin|>`, a Qwen3
prompt that opened the block) is a call, and a `<think>` inside an argument value is that value's
text, not a chain of thought. A call ends the reasoning channel at its opener, as the end marker
would; a region that turns out not to be a call goes back, verbatim, to the channel it was written
in. The server makes one `ResponseReader` per choice and feeds it text deltas.
"""
from __future__ import annotations

from typing import Callable, Optional

from atom.chat.reasoning import ReasoningChannel, ReasoningPiece
from atom.chat.tool_parser.events import (
    CallFound, ContentDelta, Event, ReasoningDelta, RegionOpened, StreamEvent)
from atom.chat.tool_parser.policy import ToolPolicy
from atom.chat.tool_parser.region import ToolFormat
from atom.chat.tool_parser.stream import ToolCallStream, new_call_id


class ResponseReader:
    def __init__(self, channel: ReasoningChannel, fmt: Optional[type[ToolFormat]],
                 policy: Optional[ToolPolicy] = None,
                 new_id: Callable[[], str] = new_call_id) -> None:
        self._reasoning = channel.stream()
        self._tools = ToolCallStream(fmt, policy, new_id, mark_regions=True) \
            if fmt is not None else None

    @property
    def tools(self) -> Optional[ToolCallStream]:
        return self._tools

    def feed(self, text: str) -> list[Event]:
        if self._tools is None:
            return _pieces(self._reasoning.feed(text))
        return self._route(self._tools.feed(text))

    def finish(self) -> list[Event]:
        if self._tools is None:
            return _pieces(self._reasoning.finish())
        return self._route(self._tools.finish()) + _pieces(self._reasoning.finish())

    def _route(self, events: list[StreamEvent]) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, ContentDelta):
                out += _pieces(self._reasoning.feed(e.text))
            elif isinstance(e, RegionOpened):
                out += _pieces(self._reasoning.flush())
            elif isinstance(e, CallFound):
                self._reasoning.leave()
            else:
                out.append(e)
        return out


def _pieces(pieces: list[ReasoningPiece]) -> list[Event]:
    return [ReasoningDelta(p.text) if p.reasoning else ContentDelta(p.text) for p in pieces]


def read_response(channel: ReasoningChannel, fmt: Optional[type[ToolFormat]], text: str,
                  policy: Optional[ToolPolicy] = None,
                  new_id: Callable[[], str] = new_call_id) -> list[Event]:
    """stream=false: the same reader over a single chunk."""
    reader = ResponseReader(channel, fmt, policy, new_id)
    return reader.feed(text) + reader.finish()
