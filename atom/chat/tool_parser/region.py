"""The contract between the one reader (stream.py) and a tool-call format.

A format declares only what is particular to it: the literals that must not be split
(`START_MARKERS`), which of those hand the stream over to a region (`opens_region`, the rest being
framing the reader drops), what one region's bytes mean (`parse_region`), and the literals that
make it worth asking (`CALL_SELF_CLOSERS`, or `REGION_END_MARKERS` where a region holds more than
one call). Reading ahead, releasing content, call indices and the text after the markup are the
reader's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One call as the format read it.

    String values still meet the declared schema (values.py) before they go out. `raw_arguments`
    is set instead when the model's arguments are not JSON at all: the client gets that text as
    written rather than arguments the reader made up.
    """

    name: str
    arguments: dict[str, Any]
    complete: bool
    id: Optional[str] = None
    raw_arguments: Optional[str] = None


@dataclass(frozen=True, slots=True)
class RegionParse:
    """What a region's bytes mean so far.

    `start`/`end` bracket the format's own markup inside the region; bytes outside them are
    content. `end` is None while the markup may still continue. `continues` says the wrapper is
    still open after `end` and the next call starts right there (the reader opens a new region
    without waiting for a start marker).
    """

    calls: tuple[ParsedCall, ...]
    start: int = 0
    end: Optional[int] = None
    continues: bool = False

    @property
    def closing(self) -> bool:
        """Its call closer has arrived but where the markup ends is not decided yet."""
        return self.end is None and bool(self.calls) and self.calls[-1].complete


class ToolFormat:
    """Base of every format: class attributes and class methods only, no per-request state."""

    NAME: ClassVar[str] = ""
    START_MARKERS: ClassVar[tuple[str, ...]] = ()
    CALL_SELF_CLOSERS: ClassVar[tuple[str, ...]] = ()
    REGION_END_MARKERS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def opens_region(cls, marker: str) -> bool:
        return True

    @classmethod
    def region_closers(cls) -> tuple[str, ...]:
        return cls.REGION_END_MARKERS or cls.CALL_SELF_CLOSERS

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        """None: not a call (at_end) or not yet one (not at_end)."""
        raise NotImplementedError

    @classmethod
    def raw_arguments(cls, region: str) -> str:
        """The text of an announced call that failed to parse, without its opener and closer."""
        opener = next((m for m in cls.START_MARKERS if region.startswith(m)), "")
        body = region[len(opener):]
        closer = next((c for c in cls.region_closers() if body.endswith(c)), "")
        return body[:len(body) - len(closer)].strip()
