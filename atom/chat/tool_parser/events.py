"""What a response reader hands the server: one event per decided piece of the answer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """The name is legible and declared: clients learn which tool before its arguments."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgs:
    """The whole arguments of call `index`, sent once its region closed: a JSON object, or the
    model's raw text where it wrote none (never arguments the reader made up)."""

    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class RegionOpened:
    """Internal to the response reader (never sent): a tool-call region starts here, so the
    reasoning stage releases the marker prefix it holds (the region's bytes cannot complete it)."""


@dataclass(frozen=True, slots=True)
class CallFound:
    """Internal to the response reader (never sent): the region is a call, whether or not the
    request's policy lets it out, so the reasoning channel ends at its opener."""


Event = Union[ContentDelta, ReasoningDelta, ToolCallStart, ToolCallArgs]
# What the tool-call reader hands the response reader: the events, and its two internal marks.
StreamEvent = Union[Event, RegionOpened, CallFound]
