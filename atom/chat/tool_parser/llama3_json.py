"""Llama-3.1/3.2/3.3: a bare `{"name": …, "parameters": {…}}`, optionally after `<|python_tag|>`.

There is no wrapper, so the object's own closing brace is the call closer; every `}` prompts a
look and the JSON decoder decides.
"""
from __future__ import annotations

from typing import Optional

from atom.chat.tool_parser.hermes import json_call
from atom.chat.tool_parser.region import RegionParse, ToolFormat

PYTHON_TAG = "<|python_tag|>"
NAME_OPEN = '{"name"'


class Llama3JsonFormat(ToolFormat):
    NAME = "llama3_json"
    START_MARKERS = (PYTHON_TAG, NAME_OPEN)
    CALL_SELF_CLOSERS = ("}",)

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        pos = len(PYTHON_TAG) if region.startswith(PYTHON_TAG) else 0
        call, end = json_call(region, pos, at_end, ("parameters", "arguments"))
        if call is None:
            return None
        return RegionParse((call,), 0, end)
