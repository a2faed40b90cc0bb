"""DeepSeek-V3 / V3.1 / R1: a section of `<｜tool▁call▁begin｜>` entries closed by
`<｜tool▁calls▁end｜>`.

Two entry shapes: V3.1 writes `NAME<｜tool▁sep｜>{JSON}`; V3 and R1 write
`function<｜tool▁sep｜>NAME\\n```json\\n{JSON}\\n```` . Either way the entry ends at
`<｜tool▁call▁end｜>`, and the region (like Kimi-K2's) is the whole section.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from atom.entrypoints.openai.tool_parser.grammar import read_section, valid_name
from atom.entrypoints.openai.tool_parser.partial_json import read_json, skip_ws
from atom.entrypoints.openai.tool_parser.region import ParsedCall, RegionParse, ToolFormat

SECTION_OPEN = "<｜tool▁calls▁begin｜>"
SECTION_CLOSE = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
SEP = "<｜tool▁sep｜>"
CALL_END = "<｜tool▁call▁end｜>"
_FENCE = "```json"


class DeepSeekV3Format(ToolFormat):
    NAME = "deepseek_v3"
    START_MARKERS = (SECTION_OPEN,)
    CALL_SELF_CLOSERS = (CALL_END,)
    REGION_END_MARKERS = (SECTION_CLOSE,)

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        return read_section(region, len(SECTION_OPEN), (SECTION_CLOSE,), CALL_BEGIN, _entry, at_end)


def _entry(region: str, pos: int, at_end: bool) -> Optional[tuple[ParsedCall, int]]:
    sep = region.find(SEP, pos)
    if sep < 0:
        return None
    head = region[pos:sep]
    body_start = sep + len(SEP)
    if head == "function":  # V3/R1: the name is the line after the separator
        nl = region.find("\n", body_start)
        if nl < 0:
            if not at_end:
                return None
            nl = len(region)
        name, body_start = region[body_start:nl], nl + 1
    else:
        name = head
    if not valid_name(name):
        return None
    end = region.find(CALL_END, body_start)
    body = region[body_start:end] if end >= 0 else region[body_start:]
    args = _arguments(body)
    if end < 0:
        return ParsedCall(name, args, False), len(region)
    return ParsedCall(name, args, True), end + len(CALL_END)


def _arguments(body: str) -> dict[str, Any]:
    text = body
    j = skip_ws(text, 0)
    if text.startswith(_FENCE, j):
        text = text[j + len(_FENCE):]
        fence_end = text.rfind("```")
        text = text[:fence_end] if fence_end >= 0 else text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        read = read_json(text)
        value = read.value if read is not None else {}
    return value if isinstance(value, dict) else {}
