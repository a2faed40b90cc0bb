"""DeepSeek-V3 / V3.1 / R1: a section of `<｜tool▁call▁begin｜>` entries closed by
`<｜tool▁calls▁end｜>`.

Two entry shapes: V3.1 writes `NAME<｜tool▁sep｜>{JSON}`; V3 and R1 write
`function<｜tool▁sep｜>NAME\\n```json\\n{JSON}\\n```` . Either way the entry ends at
`<｜tool▁call▁end｜>`, and the region (like Kimi-K2's) is the whole section, read entry by
entry.
"""
from __future__ import annotations

from typing import Optional

from atom.chat.tool_parser.grammar import (
    earliest, json_arguments, read_section, skip_entry, valid_name)
from atom.chat.tool_parser.partial_json import skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat

SECTION_OPEN = "<｜tool▁calls▁begin｜>"
SECTION_CLOSE = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
SEP = "<｜tool▁sep｜>"
CALL_END = "<｜tool▁call▁end｜>"
_FENCE = "```json"


_ENTRY_STOPS = (CALL_END, CALL_BEGIN, SECTION_CLOSE)


class DeepSeekV3Format(ToolFormat):
    NAME = "deepseek_v3"
    START_MARKERS = (SECTION_OPEN,)
    CALL_SELF_CLOSERS = (CALL_END,)
    REGION_END_MARKERS = (SECTION_CLOSE,)

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        return read_section(region, len(SECTION_OPEN), (SECTION_CLOSE,), CALL_BEGIN, _entry, at_end)


def _entry(region: str, pos: int,
           at_end: bool) -> Optional[tuple[Optional[ParsedCall], int]]:
    stop = earliest(region, pos, _ENTRY_STOPS)
    sep = region.find(SEP, pos)
    if sep < 0 or (stop is not None and stop[0] < sep):
        return skip_entry(region, stop, CALL_END, at_end)
    head = region[pos:sep].strip()
    body_start = sep + len(SEP)
    if head == "function":  # V3/R1: the name is the line after the separator
        nl = region.find("\n", body_start)
        if nl < 0 or (stop is not None and stop[0] < nl):
            if stop is None and not at_end:
                return None
            nl = stop[0] if stop is not None else len(region)
        name, body_start = region[body_start:nl].strip(), min(nl + 1, len(region))
    else:
        name = head
    stop = earliest(region, body_start, _ENTRY_STOPS)
    if not valid_name(name):
        return skip_entry(region, stop, CALL_END, at_end)
    body = region[body_start:stop[0]] if stop else region[body_start:]
    args, raw = json_arguments(_unfenced(body), complete=stop is not None)
    if stop is None:
        return ParsedCall(name, args, False, raw_arguments=raw), len(region)
    end = stop[0] + len(CALL_END) if stop[1] == CALL_END else stop[0]
    return ParsedCall(name, args, True, raw_arguments=raw), end


def _unfenced(body: str) -> str:
    j = skip_ws(body, 0)
    if not body.startswith(_FENCE, j):
        return body
    text = body[j + len(_FENCE):]
    fence_end = text.rfind("```")
    return text[:fence_end] if fence_end >= 0 else text
