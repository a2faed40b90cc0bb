"""Kimi-K2: a section of entries, each `<|tool_call_begin|>functions.NAME:IDX
<|tool_call_argument_begin|>{JSON}<|tool_call_end|>`, closed by `<|tool_calls_section_end|>`.

The region is the whole section (REGION_END_MARKERS), read entry by entry (grammar.read_section):
whitespace around an id is not part of it, a bare index is not a name, and an entry whose
arguments are not a JSON object keeps its raw text. The entry tokens are the format's own: met
outside a section they are dropped like any framing, never shown as content.
"""
from __future__ import annotations

from typing import Optional

from atom.chat.tool_parser.grammar import (
    earliest, json_arguments, read_section, skip_entry, valid_name)
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat

SECTION_OPENERS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_CLOSERS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_ENTRY_STOPS = (CALL_END, CALL_BEGIN) + SECTION_CLOSERS


class KimiFormat(ToolFormat):
    NAME = "kimi"
    START_MARKERS = SECTION_OPENERS + SECTION_CLOSERS + (CALL_BEGIN, ARGS_BEGIN, CALL_END)
    CALL_SELF_CLOSERS = (CALL_END,)
    REGION_END_MARKERS = SECTION_CLOSERS

    @classmethod
    def opens_region(cls, marker: str) -> bool:
        return marker in SECTION_OPENERS

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        opener = next(o for o in SECTION_OPENERS if region.startswith(o))
        return read_section(region, len(opener), SECTION_CLOSERS, CALL_BEGIN, _entry, at_end)


def _entry(region: str, pos: int,
           at_end: bool) -> Optional[tuple[Optional[ParsedCall], int]]:
    """One entry; the name is legible once the arguments marker follows the id."""
    stop = earliest(region, pos, _ENTRY_STOPS)
    a = region.find(ARGS_BEGIN, pos)
    if a < 0 or (stop is not None and stop[0] < a):
        return skip_entry(region, stop, CALL_END, at_end)
    call_id = region[pos:a].strip()
    name = _name_of(call_id)
    body_at = a + len(ARGS_BEGIN)
    stop = earliest(region, body_at, _ENTRY_STOPS)
    if name is None:
        return skip_entry(region, stop, CALL_END, at_end)
    body = region[body_at:stop[0]] if stop else region[body_at:]
    args, raw = json_arguments(body, complete=stop is not None)
    if stop is None:
        return ParsedCall(name, args, False, id=call_id, raw_arguments=raw), len(region)
    end = stop[0] + len(CALL_END) if stop[1] == CALL_END else stop[0]
    return ParsedCall(name, args, True, id=call_id, raw_arguments=raw), end


def _name_of(call_id: str) -> Optional[str]:
    """`functions.get_weather:0` -> `get_weather`; a bare name is accepted too."""
    base = call_id.split(":", 1)[0] if ":" in call_id else call_id
    name = base.split(".", 1)[1] if base.startswith("functions.") else base
    return name if valid_name(name) else None
