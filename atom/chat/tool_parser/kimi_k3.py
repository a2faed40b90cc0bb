"""Kimi-K3: channel-framed answers; a call is `<|open|>call tool="N" index="1"<|sep|>` with
`<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>` entries (or one
`<|open|>json …<|sep|>{…}<|close|>json<|sep|>`), closed by `<|close|>call<|sep|>`.

Of the format's markers only the two in `kimi_k3_tokens.REGION_OPENERS` hand the stream over;
the rest is framing that wraps every answer and is dropped, which is why opening a region is asked
of the format rather than assumed of every marker.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from atom.chat import kimi_k3_tokens as k3
from atom.chat.tool_parser.grammar import (
    close_after, could_become, earliest, json_arguments, quoted_attr, read_attrs, valid_name)
from atom.chat.tool_parser.partial_json import skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat


class KimiK3Format(ToolFormat):
    NAME = "kimi_k3"
    START_MARKERS = k3.FRAMING + k3.REGION_OPENERS
    CALL_SELF_CLOSERS = (k3.CALL_CLOSE,)

    @classmethod
    def opens_region(cls, marker: str) -> bool:
        return marker in k3.REGION_OPENERS

    @classmethod
    def parse_region(cls, region: str, at_end: bool) -> Optional[RegionParse]:
        pos = skip_ws(region, len(k3.TOOLS_OPEN)) if region.startswith(k3.TOOLS_OPEN) else 0
        if pos and region.startswith(k3.TOOLS_CLOSE, pos):
            return RegionParse((), 0, pos + len(k3.TOOLS_CLOSE))
        if not region.startswith(k3.CALL_OPEN, pos):
            return None
        read = _call(region, pos + len(k3.CALL_OPEN), at_end)
        if read is None:
            return None
        call, end = read
        if end is None:
            return RegionParse((call,))
        tail = close_after(region, end, at_end, (k3.TOOLS_CLOSE,), (k3.CALL_OPEN,))
        if tail is None:
            return RegionParse((call,))
        return RegionParse((call,), 0, tail[0], continues=tail[1])


def _call(region: str, pos: int, at_end: bool) -> Optional[tuple[ParsedCall, Optional[int]]]:
    named = quoted_attr(region, pos, "tool", at_end)
    if named is None or not valid_name(named[0]):
        return None
    name = named[0]
    sep = region.find(k3.SEP, named[1])
    if sep < 0:
        return (ParsedCall(name, {}, False), None) if at_end or _attrs_so_far(region, named[1]) \
            else None
    args: dict[str, Any] = {}
    raw: list[str] = []
    pos = sep + len(k3.SEP)
    while True:
        if region.startswith(k3.CALL_CLOSE, pos):
            return ParsedCall(name, args, True, raw_arguments=raw[0] if raw else None), \
                pos + len(k3.CALL_CLOSE)
        if region.startswith(k3.ARGUMENT_OPEN, pos):
            done = _argument(region, pos + len(k3.ARGUMENT_OPEN), args)
        elif region.startswith(k3.JSON_OPEN, pos):
            done = _json(region, pos + len(k3.JSON_OPEN), args, raw)
        else:
            rest = region[pos:]
            if rest and not could_become(rest, (k3.CALL_CLOSE, k3.ARGUMENT_OPEN, k3.JSON_OPEN)):
                return None
            return ParsedCall(name, args, False), None
        if done is None:
            return ParsedCall(name, args, False), None
        pos = done


def _attrs_so_far(region: str, pos: int) -> bool:
    """Before `<|sep|>` the call is named once the tool attribute closed; more attrs may follow."""
    return all(c not in region[pos:] for c in "<>")


def _argument(region: str, pos: int, args: dict[str, Any]) -> Optional[int]:
    sep = region.find(k3.SEP, pos)
    if sep < 0:
        return None
    attrs = read_attrs(region[pos:sep])
    key = attrs.get("key")
    if key is None:
        return None
    hit = earliest(region, sep + len(k3.SEP), (k3.ARGUMENT_CLOSE, k3.CALL_CLOSE))
    value = region[sep + len(k3.SEP):hit[0]] if hit else region[sep + len(k3.SEP):]
    args[key] = _typed(value, attrs.get("type", "string"))
    if hit is None:
        return None
    return hit[0] + (len(k3.ARGUMENT_CLOSE) if hit[1] == k3.ARGUMENT_CLOSE else 0)


def _json(region: str, pos: int, args: dict[str, Any], raw: list[str]) -> Optional[int]:
    """The arguments as one JSON object; text that is not one is kept raw in `raw`."""
    sep = region.find(k3.SEP, pos)
    if sep < 0:
        return None
    hit = earliest(region, sep + len(k3.SEP), (k3.JSON_CLOSE, k3.CALL_CLOSE))
    body = region[sep + len(k3.SEP):hit[0]] if hit else region[sep + len(k3.SEP):]
    value, text = json_arguments(body, complete=hit is not None)
    args.update(value)
    if text is not None:
        raw.append(text)
    if hit is None:
        return None
    return hit[0] + (len(k3.JSON_CLOSE) if hit[1] == k3.JSON_CLOSE else 0)


def _typed(value: str, kind: str) -> Any:
    if kind == "string":
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
