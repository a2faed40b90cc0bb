"""Small pieces of grammar the tag formats share: names, terminators, attributes, tails.

Every `parse_region` must be monotone: once it returns an `end` for some bytes, more bytes may
not change that answer. The helpers here keep that property by saying "undecided" (None) while
the bytes so far could still become a longer literal.
"""
from __future__ import annotations

import html
import json
import re
from typing import Callable, Optional

from atom.chat.tool_parser.partial_json import read_json, skip_ws
from atom.chat.tool_parser.region import ParsedCall, RegionParse

_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
_ATTR = re.compile(r'\s*([A-Za-z_][\w\-]*)\s*=\s*"([^"]*)"')


def valid_name(name: str) -> bool:
    """A tool name; digits alone are a call index the model wrote where the name belongs."""
    return bool(_NAME.fullmatch(name)) and not name.isdigit()


def could_become(rest: str, literals: tuple[str, ...]) -> bool:
    """`rest` is a proper prefix of one of `literals` (so more bytes may complete it)."""
    return any(len(lit) > len(rest) and lit.startswith(rest) for lit in literals)


def expect(text: str, pos: int, literal: str, at_end: bool) -> Optional[bool]:
    """True if `literal` is at `pos`, None if it still could be, False if it cannot."""
    if text.startswith(literal, pos):
        return True
    if not at_end and literal.startswith(text[pos:]):
        return None
    return False


def earliest(text: str, pos: int, literals: tuple[str, ...]) -> Optional[tuple[int, str]]:
    best: Optional[tuple[int, str]] = None
    for lit in literals:
        p = text.find(lit, pos)
        if p >= 0 and (best is None or p < best[0]):
            best = (p, lit)
    return best


def close_after(text: str, pos: int, at_end: bool, wrapper_closers: tuple[str, ...] = (),
                continuers: tuple[str, ...] = ()) -> Optional[tuple[int, bool]]:
    """Where a region ends after its call closer at `pos`, and whether the next call follows.

    Whitespace up to a wrapper closer or to the next call inside the wrapper is markup; otherwise
    the region ends right at `pos` and what follows is the answer. None: undecided yet.
    """
    if not wrapper_closers and not continuers:
        return pos, False
    j = skip_ws(text, pos)
    rest = text[j:]
    for closer in wrapper_closers:
        if rest.startswith(closer):
            return j + len(closer), False
    for opener in continuers:
        if rest.startswith(opener):
            return j, True
    if not at_end and (not rest or could_become(rest, wrapper_closers + continuers)):
        return None
    return pos, False


def read_attrs(text: str) -> dict[str, str]:
    """`key="value"` pairs, HTML-unescaped (the templates escape `&` and `"`)."""
    return {m.group(1): html.unescape(m.group(2)) for m in _ATTR.finditer(text)}


def quoted_attr(text: str, pos: int, name: str, at_end: bool) -> Optional[tuple[str, int]]:
    """Read `name="value"` starting at `pos` (after optional spaces): (value, end) or None.

    Without at_end the closing quote is required: a name cut mid-way is not yet a name.
    """
    j = pos
    while j < len(text) and text[j] == " ":
        j += 1
    head = f'{name}="'
    if not text.startswith(head, j):
        return None
    q = text.find('"', j + len(head))
    if q < 0:
        return (html.unescape(text[j + len(head):]), len(text)) if at_end else None
    return html.unescape(text[j + len(head):q]), q + 1


def trim_one_newline(value: str) -> str:
    """Undo the one newline the Qwen templates put on each side of a value; nothing more."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def read_section(region: str, pos: int, closers: tuple[str, ...], call_begin: str,
                 entry: Callable[[str, int, bool], Optional[tuple[Optional[ParsedCall], int]]],
                 at_end: bool) -> RegionParse:
    """The entry loop of a section-shaped region (Kimi-K2, DeepSeek-V3): entries each opened by
    `call_begin` until one of `closers`.

    `entry` reads one entry after its opener and returns the call (None: the entry does not
    read as one) and where it ended, or None while it is not legible yet. Each entry stands on
    its own: text between entries (stray tokens, a word) is markup, and a bad entry costs that
    entry, not the section.
    """
    calls: list[ParsedCall] = []
    while True:
        hit = earliest(region, pos, closers + (call_begin,))
        if hit is None:
            return RegionParse(tuple(calls))
        if hit[1] != call_begin:
            return RegionParse(tuple(calls), 0, hit[0] + len(hit[1]))
        read = entry(region, hit[0] + len(call_begin), at_end)
        if read is None:
            return RegionParse(tuple(calls))
        call, pos = read
        if call is not None:
            calls.append(call)
            if not call.complete:
                return RegionParse(tuple(calls))


def skip_entry(region: str, stop: Optional[tuple[int, str]], end_token: str,
               at_end: bool) -> Optional[tuple[Optional[ParsedCall], int]]:
    """A section entry that is no call: it ends at its own end token or where the next entry
    or the section's closer begins; None while neither has arrived."""
    if stop is None:
        return (None, len(region)) if at_end else None
    return None, stop[0] + len(end_token) if stop[1] == end_token else stop[0]


def json_arguments(body: str, complete: bool) -> tuple[dict, Optional[str]]:
    """(arguments, None) for a JSON object, or ({}, the text) when the model's arguments are not
    one: the client gets what was written, never an invented `{}`. A body cut off by the end of
    the text is completed (a truncated call still carries valid JSON)."""
    text = body.strip()
    if complete:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return {}, text
        return (value, None) if isinstance(value, dict) else ({}, text)
    read = read_json(text)
    if read is None or not isinstance(read.value, dict):
        return {}, text
    return read.value, None
