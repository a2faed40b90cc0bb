"""Hermes (Qwen3 and Qwen2.5 dense, NousResearch): JSON inside `<tool_call>…</tool_call>`.

The JSON object is the call; `</tool_call>` only prompts a look, since a string value may
contain it.
"""
from __future__ import annotations

import json
import re
from typing import Optional

from atom.chat.tool_parser.grammar import close_after, json_arguments, valid_name
from atom.chat.tool_parser.partial_json import read_json, skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_NAME_FIRST = re.compile(r'\{\s*"name"\s*:\s*"([^"\\]+)"\s*[,}]')


class HermesFormat(ToolFormat):
    NAME = "hermes"
    START_MARKERS = (OPEN,)
    CALL_SELF_CLOSERS = (CLOSE,)

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        call, end = json_call(region, len(OPEN), at_end, ("arguments", "parameters"))
        if call is None:
            return None
        if end is None:
            return RegionParse((call,))
        tail = close_after(region, end, at_end, wrapper_closers=(CLOSE,))
        return RegionParse((call,), 0, tail[0] if tail else None)


def json_call(region: str, pos: int, at_end: bool,
              arg_keys: tuple[str, ...]) -> tuple[Optional[ParsedCall], Optional[int]]:
    """A `{"name": …, <arg_key>: {…}}` call at `pos`: (call, end of the object) or (None, None).

    Before the object completes, the name counts only once its closing quote and a follower
    have arrived, so a name cut mid-way is never announced.
    """
    j = skip_ws(region, pos)
    read = read_json(region, j)
    if read is None or not isinstance(read.value, dict):
        return None, None
    obj = read.value
    if read.complete:
        name = obj.get("name")
    elif at_end:
        name = obj.get("name") if isinstance(obj.get("name"), str) else None
    else:
        m = _NAME_FIRST.match(region, j)
        name = m.group(1) if m else None
    if not isinstance(name, str) or not valid_name(name):
        return None, None
    args = next((obj[k] for k in arg_keys if k in obj), {})
    raw: Optional[str] = None
    if isinstance(args, str):  # arguments written as a JSON string
        args, raw = json_arguments(args, complete=read.complete)
    elif not isinstance(args, dict):
        args, raw = {}, json.dumps(args, ensure_ascii=False)
    call = ParsedCall(name, dict(args), read.complete, raw_arguments=raw)
    return call, (read.end if read.complete else None)

