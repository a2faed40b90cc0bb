"""GLM-4.5/4.6/4.7: `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>`.

Here `</tool_call>` is the call's own closer (there is no inner function tag), so it also ends
any key or value it interrupts.
"""
from __future__ import annotations

from typing import Any, Optional

from atom.chat.tool_parser.grammar import could_become, earliest, valid_name
from atom.chat.tool_parser.partial_json import skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
KEY, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE, VALUE_CLOSE = "<arg_value>", "</arg_value>"


class GlmFormat(ToolFormat):
    NAME = "glm"
    START_MARKERS = (OPEN,)
    CALL_SELF_CLOSERS = (CLOSE,)

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        start = len(OPEN)
        hit = earliest(region, start, ("\n", KEY, CLOSE))
        if hit is None and not at_end:
            return None
        name = region[start:hit[0]] if hit else region[start:]
        if not valid_name(name):
            return None
        read = _arguments(region, hit[0] if hit else len(region), at_end)
        if read is None:
            return None
        args, end = read
        call = ParsedCall(name, args, end is not None)
        return RegionParse((call,), 0, end)


def _arguments(region: str, pos: int,
               at_end: bool) -> Optional[tuple[dict[str, Any], Optional[int]]]:
    """(arguments, end of the call or None while open), or None if this is not a call."""
    args: dict[str, Any] = {}
    while True:
        p = skip_ws(region, pos)
        if region.startswith(CLOSE, p):
            return args, p + len(CLOSE)
        if not region.startswith(KEY, p):
            rest = region[p:]
            return (args, None) if not rest or could_become(rest, (KEY, CLOSE)) else None
        key_hit = earliest(region, p + len(KEY), (KEY_CLOSE, CLOSE))
        if key_hit is None or key_hit[1] == CLOSE:
            return args, (key_hit[0] + len(CLOSE) if key_hit else None)
        key = region[p + len(KEY):key_hit[0]]
        v = skip_ws(region, key_hit[0] + len(KEY_CLOSE))
        if not region.startswith(VALUE, v):
            return args, None
        value_hit = earliest(region, v + len(VALUE), (VALUE_CLOSE, CLOSE))
        if value_hit is None:
            if at_end:
                args[key] = region[v + len(VALUE):]
            return args, None
        args[key] = region[v + len(VALUE):value_hit[0]]
        pos = value_hit[0] + (len(VALUE_CLOSE) if value_hit[1] == VALUE_CLOSE else 0)
