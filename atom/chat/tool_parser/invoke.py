"""The `<invoke name="…">…</invoke>` body MiniMax-M2 and DeepSeek DSML share, up to a prefix.

Both formats list the call closer among the terminators of a parameter value, so a model writing
`</invoke>` inside a value ends the value and the call, and the literal can never hide there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from atom.chat.tool_parser.grammar import (
    close_after, could_become, earliest, quoted_attr, read_attrs, valid_name)
from atom.chat.tool_parser.partial_json import read_json, skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse


@dataclass(frozen=True, slots=True)
class InvokeSyntax:
    prefix: str  # "" for MiniMax, "｜DSML｜" for DeepSeek

    @property
    def invoke(self) -> str:
        return f"<{self.prefix}invoke"

    @property
    def invoke_close(self) -> str:
        return f"</{self.prefix}invoke>"

    @property
    def param(self) -> str:
        return f"<{self.prefix}parameter"

    @property
    def param_close(self) -> str:
        return f"</{self.prefix}parameter>"


def read_invoke(text: str, pos: int, syn: InvokeSyntax,
                at_end: bool) -> Optional[tuple[ParsedCall, Optional[int]]]:
    """One invoke at `pos`: (call, end after its closer or None while open), None if not one."""
    if not text.startswith(syn.invoke, pos):
        return None
    named = quoted_attr(text, pos + len(syn.invoke), "name", at_end)
    if named is None:
        return None
    name, p = named
    if not valid_name(name):
        return None
    if text.startswith("/>", p):
        return ParsedCall(name, {}, True), p + 2
    if p >= len(text) or (not at_end and text[p:] == "/"):
        return ParsedCall(name, {}, False), None
    if text[p] != ">":
        return None
    body = skip_ws(text, p + 1)
    if text.startswith("{", body):
        return _json_body(text, body, syn, name, at_end)
    return _param_body(text, p + 1, syn, name)


def invoke_region(region: str, pos: int, syn: InvokeSyntax, at_end: bool,
                  closers: tuple[str, ...]) -> Optional[RegionParse]:
    """One invoke read from `pos`, then what follows it: a wrapper closer ends the region, the
    next invoke continues into a new one (both formats' regions are one invoke each)."""
    read = read_invoke(region, pos, syn, at_end)
    if read is None:
        return None
    call, end = read
    if end is None:
        return RegionParse((call,))
    tail = close_after(region, end, at_end, closers, (syn.invoke,))
    if tail is None:
        return RegionParse((call,))
    return RegionParse((call,), 0, tail[0], continues=tail[1])


def _json_body(text: str, pos: int, syn: InvokeSyntax, name: str,
               at_end: bool) -> Optional[tuple[ParsedCall, Optional[int]]]:
    """DSML's direct-JSON branch: the whole arguments object, then the closer."""
    read = read_json(text, pos)
    if read is None or not isinstance(read.value, dict):
        return None
    if not read.complete:
        return ParsedCall(name, read.value, False), None
    close = skip_ws(text, read.end)
    if text.startswith(syn.invoke_close, close):
        return ParsedCall(name, read.value, True), close + len(syn.invoke_close)
    if could_become(text[close:], (syn.invoke_close,)) or close >= len(text):
        return ParsedCall(name, read.value, False), None
    return None


def _param_body(text: str, pos: int, syn: InvokeSyntax,
                name: str) -> Optional[tuple[ParsedCall, Optional[int]]]:
    args: dict[str, Any] = {}
    while True:
        p = skip_ws(text, pos)
        if text.startswith(syn.invoke_close, p):
            return ParsedCall(name, args, True), p + len(syn.invoke_close)
        if not text.startswith(syn.param, p):
            rest = text[p:]
            if rest and not could_become(rest, (syn.param, syn.invoke_close)):
                return None
            return ParsedCall(name, args, False), None
        gt = text.find(">", p + len(syn.param))
        if gt < 0:
            return ParsedCall(name, args, False), None
        attrs = read_attrs(text[p + len(syn.param):gt])
        key = attrs.get("name")
        if key is None:
            return None
        hit = earliest(text, gt + 1, (syn.param_close, syn.invoke_close))
        value = text[gt + 1:hit[0]] if hit else text[gt + 1:]
        args[key] = _typed(value, attrs.get("string"))
        if hit is None:
            return ParsedCall(name, args, False), None
        pos = hit[0] + (len(syn.param_close) if hit[1] == syn.param_close else 0)


def _typed(value: str, string_attr: Optional[str]) -> Any:
    """DSML says per value whether it is JSON; a string meets the schema later (values.py)."""
    if string_attr == "false":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
