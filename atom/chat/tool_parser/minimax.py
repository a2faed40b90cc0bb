"""MiniMax-M2: `<minimax:tool_call>\n<invoke name="N">\n<parameter name="K">V</parameter>\n</invoke>`.

A region is one invoke; the next invoke inside the same wrapper continues straight into a new
region, so the whitespace between them is markup rather than answer.
"""
from __future__ import annotations

from typing import Optional

from atom.chat.tool_parser.grammar import expect
from atom.chat.tool_parser.invoke import InvokeSyntax, invoke_region
from atom.chat.tool_parser.partial_json import skip_ws
from atom.chat.tool_parser.region import RegionParse, ToolFormat

OPEN = "<minimax:tool_call>"
CLOSE = "</minimax:tool_call>"
SYNTAX = InvokeSyntax("")


class MiniMaxFormat(ToolFormat):
    NAME = "minimax"
    START_MARKERS = (OPEN,)
    CALL_SELF_CLOSERS = (SYNTAX.invoke_close, "/>")

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        pos = skip_ws(region, len(OPEN)) if region.startswith(OPEN) else 0
        if expect(region, pos, SYNTAX.invoke, at_end) is not True:
            return _empty_wrapper(region, pos, at_end)
        return invoke_region(region, pos, SYNTAX, at_end, (CLOSE,))


def _empty_wrapper(region: str, pos: int, at_end: bool) -> Optional[RegionParse]:
    """`<minimax:tool_call></minimax:tool_call>` is markup that holds no call."""
    if region.startswith(OPEN) and region.startswith(CLOSE, pos):
        return RegionParse((), 0, pos + len(CLOSE))
    return None
