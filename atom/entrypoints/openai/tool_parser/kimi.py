"""Kimi-K2: a section of entries, each `<|tool_call_begin|>functions.NAME:IDX
<|tool_call_argument_begin|>{JSON}<|tool_call_end|>`, closed by `<|tool_calls_section_end|>`.

The region is the whole section (REGION_END_MARKERS). The arguments are JSON the model wrote; a
truncated object is completed so a cut-off call still carries valid JSON.
"""
from __future__ import annotations

import json
from typing import Optional

from atom.entrypoints.openai.tool_parser.grammar import read_section, valid_name
from atom.entrypoints.openai.tool_parser.partial_json import read_json
from atom.entrypoints.openai.tool_parser.region import ParsedCall, RegionParse, ToolFormat

SECTION_OPENERS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_CLOSERS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"


class KimiFormat(ToolFormat):
    NAME = "kimi"
    START_MARKERS = SECTION_OPENERS
    CALL_SELF_CLOSERS = (CALL_END,)
    REGION_END_MARKERS = SECTION_CLOSERS

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        opener = next(o for o in SECTION_OPENERS if region.startswith(o))
        return read_section(region, len(opener), SECTION_CLOSERS, CALL_BEGIN, _entry, at_end)


def _entry(region: str, pos: int, at_end: bool) -> Optional[tuple[ParsedCall, int]]:
    """One entry; the name is legible once the arguments marker follows the id."""
    a = region.find(ARGS_BEGIN, pos)
    if a < 0:
        return None
    call_id = region[pos:a]
    name = _name_of(call_id)
    if name is None:
        return None
    e = region.find(CALL_END, a + len(ARGS_BEGIN))
    body = region[a + len(ARGS_BEGIN):e] if e >= 0 else region[a + len(ARGS_BEGIN):]
    args = _arguments(body)
    if e < 0:
        return ParsedCall(name, args, False, id=call_id), len(region)
    return ParsedCall(name, args, True, id=call_id), e + len(CALL_END)


def _name_of(call_id: str) -> Optional[str]:
    """`functions.get_weather:0` -> `get_weather`; a bare name is accepted too."""
    base = call_id.split(":", 1)[0] if ":" in call_id else call_id
    name = base.split(".", 1)[1] if base.startswith("functions.") else base
    return name if valid_name(name) else None


def _arguments(body: str) -> dict:
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        read = read_json(body)
        value = read.value if read is not None else {}
    return value if isinstance(value, dict) else {}
