"""Qwen3-Coder / Qwen3.5: `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>`.

`</function>` is the call's own closer and ends any parameter value; `</tool_call>` is only the
wrapper, which a value can contain, so it is never taken as the end of a call. A value ends at
its own `</parameter>` (or the call's closer) and nowhere else: `<parameter=` inside it is text
(a file that documents the tags, a prompt that names them). Models also write the function
without the wrapper, so `<function=` opens a region too.
"""
from __future__ import annotations

from typing import Any, Optional

from atom.chat.tool_parser.grammar import (
    close_after, could_become, earliest, expect, trim_one_newline, valid_name)
from atom.chat.tool_parser.partial_json import skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat

OPEN = "<tool_call>"
WRAPPER_CLOSE = "</tool_call>"
FUNCTION = "<function="
FUNCTION_CLOSE = "</function>"
PARAM = "<parameter="
PARAM_CLOSE = "</parameter>"


class QwenFormat(ToolFormat):
    NAME = "qwen"
    START_MARKERS = (OPEN, FUNCTION)
    CALL_SELF_CLOSERS = (FUNCTION_CLOSE,)

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        wrapped = region.startswith(OPEN)
        j = skip_ws(region, len(OPEN)) if wrapped else 0
        if expect(region, j, FUNCTION, at_end) is not True:
            return None
        start = j + len(FUNCTION)
        gt = region.find(">", start)
        name = region[start:gt] if gt >= 0 else (region[start:] if at_end else "")
        if not valid_name(name):
            return None
        read = _parameters(region, len(region) if gt < 0 else gt + 1)
        if read is None:
            return None
        args, pos, complete = read
        call = ParsedCall(name, args, complete)
        if not complete:
            return RegionParse((call,))
        tail = close_after(region, pos, at_end, wrapper_closers=(WRAPPER_CLOSE,) if wrapped else ())
        if tail is None:
            return RegionParse((call,))
        return RegionParse((call,), 0, tail[0])


def _parameters(region: str, pos: int) -> Optional[tuple[dict[str, Any], int, bool]]:
    """Read parameters up to `</function>`; a value ends at its own closer or at the call's.

    A value cut off by the end of the text is kept as written (a truncated call's arguments);
    anything but a parameter or the closer after a value means this is not a call: None.
    """
    args: dict[str, Any] = {}
    while True:
        p = skip_ws(region, pos)
        if region.startswith(FUNCTION_CLOSE, p):
            return args, p + len(FUNCTION_CLOSE), True
        if not region.startswith(PARAM, p):
            rest = region[p:]
            ok = not rest or could_become(rest, (PARAM, FUNCTION_CLOSE))
            return (args, p, False) if ok else None
        gt = region.find(">", p + len(PARAM))
        if gt < 0:
            return args, p, False
        key = region[p + len(PARAM):gt]
        hit = earliest(region, gt + 1, (PARAM_CLOSE, FUNCTION_CLOSE))
        if hit is None:
            args[key] = trim_one_newline(region[gt + 1:])
            return args, len(region), False
        args[key] = trim_one_newline(region[gt + 1:hit[0]])
        pos = hit[0] + len(PARAM_CLOSE) if hit[1] == PARAM_CLOSE else hit[0]
