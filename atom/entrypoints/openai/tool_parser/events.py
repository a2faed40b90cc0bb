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
    """The whole arguments object of call `index`, valid JSON, sent once its region closed."""

    index: int
    arguments: str


Event = Union[ContentDelta, ReasoningDelta, ToolCallStart, ToolCallArgs]
