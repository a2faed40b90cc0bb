"""DeepSeek-V3.2 / V4 DSML: `<｜DSML｜function_calls>` (V3.2) or `<｜DSML｜tool_calls>` (V4)
wrapping `<｜DSML｜invoke name="N">` bodies of `<｜DSML｜parameter name="K" string="true">V`.

Three shapes reach the parser besides the wrapped one: a wrapper-less invoke, a self-closing
`<｜DSML｜invoke name="N"/>`, and a body that is one JSON object instead of parameters.
"""
from __future__ import annotations

from typing import Optional

from atom.chat.tool_parser.invoke import InvokeSyntax, invoke_region
from atom.chat.tool_parser.partial_json import skip_ws
from atom.chat.tool_parser.region import RegionParse, ToolFormat

TOKEN = "｜DSML｜"
SYNTAX = InvokeSyntax(TOKEN)
WRAPPERS = (f"<{TOKEN}function_calls>", f"<{TOKEN}tool_calls>")
WRAPPER_CLOSERS = (f"</{TOKEN}function_calls>", f"</{TOKEN}tool_calls>")


class DsmlFormat(ToolFormat):
    NAME = "dsml"
    START_MARKERS = WRAPPERS + (SYNTAX.invoke,)
    CALL_SELF_CLOSERS = (SYNTAX.invoke_close, "/>")

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        pos = 0
        for wrapper in WRAPPERS:
            if region.startswith(wrapper):
                pos = skip_ws(region, len(wrapper))
                break
        if pos and any(region.startswith(c, pos) for c in WRAPPER_CLOSERS):
            closer = next(c for c in WRAPPER_CLOSERS if region.startswith(c, pos))
            return RegionParse((), 0, pos + len(closer))
        return invoke_region(region, pos, SYNTAX, at_end, WRAPPER_CLOSERS)
