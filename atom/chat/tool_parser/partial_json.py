"""Reading a JSON value that may have been cut off.

A call truncated by max_tokens still has to reach the client as valid JSON: the half-written
value becomes what was written of it (a string keeps its prefix, a key without a value is dropped),
and containers are closed. Whole values go through the C decoder; this module only handles the
tail that the decoder refuses.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"
_MISSING = object()


@dataclass(frozen=True, slots=True)
class JsonRead:
    """A value read from `text[pos:end]`; `complete` is False when the text ran out inside it."""

    value: Any
    end: int
    complete: bool


def read_json(text: str, pos: int = 0) -> Optional[JsonRead]:
    """The complete value starting at `pos`, else the truncated one, else None if invalid."""
    pos = skip_ws(text, pos)
    try:
        value, end = _DECODER.raw_decode(text, pos)
        return JsonRead(value, end, True)
    except json.JSONDecodeError:
        pass
    try:
        value, end = _Partial(text).value(pos)
    except _Invalid:
        return None
    if value is _MISSING:
        return None
    return JsonRead(value, end, False)


def skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


class _Invalid(Exception):
    """The text is not a prefix of any JSON value."""


class _Truncated(Exception):
    """Internal: the text ended inside a value; carries what was read of it."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class _Partial:
    """Recursive descent over a JSON prefix; raises _Truncated at the end of the text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, pos: int) -> tuple[Any, int]:
        try:
            return self._value(pos)
        except _Truncated as cut:
            return cut.value, len(self.text)

    def _value(self, pos: int) -> tuple[Any, int]:
        t = self.text
        pos = skip_ws(t, pos)
        if pos >= len(t):
            raise _Truncated(_MISSING)
        c = t[pos]
        if c == "{":
            return self._object(pos + 1)
        if c == "[":
            return self._array(pos + 1)
        if c == '"':
            return self._string(pos + 1)
        return self._scalar(pos)

    def _object(self, pos: int) -> tuple[Any, int]:
        t, out = self.text, {}
        pos = skip_ws(t, pos)
        if pos < len(t) and t[pos] == "}":
            return out, pos + 1
        while True:
            pos = skip_ws(t, pos)
            if pos >= len(t):
                raise _Truncated(out)
            if t[pos] != '"':
                raise _Invalid()
            try:
                key, pos = self._string(pos + 1)
            except _Truncated:
                raise _Truncated(out) from None
            pos = skip_ws(t, pos)
            if pos >= len(t):
                raise _Truncated(out)
            if t[pos] != ":":
                raise _Invalid()
            try:
                val, pos = self._value(pos + 1)
            except _Truncated as cut:
                if cut.value is not _MISSING:
                    out[key] = cut.value
                raise _Truncated(out) from None
            out[key] = val
            pos = skip_ws(t, pos)
            if pos >= len(t):
                raise _Truncated(out)
            if t[pos] == "}":
                return out, pos + 1
            if t[pos] != ",":
                raise _Invalid()
            pos += 1

    def _array(self, pos: int) -> tuple[Any, int]:
        t, out = self.text, []
        pos = skip_ws(t, pos)
        if pos < len(t) and t[pos] == "]":
            return out, pos + 1
        while True:
            try:
                val, pos = self._value(pos)
            except _Truncated as cut:
                if cut.value is not _MISSING:
                    out.append(cut.value)
                raise _Truncated(out) from None
            out.append(val)
            pos = skip_ws(t, pos)
            if pos >= len(t):
                raise _Truncated(out)
            if t[pos] == "]":
                return out, pos + 1
            if t[pos] != ",":
                raise _Invalid()
            pos += 1

    def _string(self, pos: int) -> tuple[str, int]:
        t = self.text
        end = pos
        while True:
            q = t.find('"', end)
            if q < 0:
                raise _Truncated(self._decode_prefix(t[pos:]))
            backslashes = 0
            while q - 1 - backslashes >= pos and t[q - 1 - backslashes] == "\\":
                backslashes += 1
            if backslashes % 2 == 0:
                try:
                    return json.loads(t[pos - 1:q + 1]), q + 1
                except json.JSONDecodeError:
                    raise _Invalid() from None
            end = q + 1

    @staticmethod
    def _decode_prefix(body: str) -> str:
        """Decode a string body cut off anywhere, dropping an unfinished escape."""
        for cut in range(0, 7):
            candidate = body[:len(body) - cut] if cut else body
            try:
                return json.loads('"' + candidate + '"')
            except json.JSONDecodeError:
                continue
        raise _Invalid()

    def _scalar(self, pos: int) -> tuple[Any, int]:
        t = self.text
        end = pos
        while end < len(t) and t[end] not in ",]}" + _WS:
            end += 1
        word = t[pos:end]
        try:
            value, used = _DECODER.raw_decode(word)
            if used == len(word) and end < len(t):
                return value, end
        except json.JSONDecodeError:
            value = _MISSING
        if end < len(t):
            raise _Invalid()
        if any(lit.startswith(word) for lit in ("true", "false", "null")):
            raise _Truncated(_MISSING)
        if value is not _MISSING and not word.endswith((".", "e", "E", "-", "+")):
            raise _Truncated(value)
        for k in range(len(word) - 1, 0, -1):
            try:
                v, used = _DECODER.raw_decode(word[:k])
                if used == k:
                    raise _Truncated(v)
            except json.JSONDecodeError:
                continue
        if "-0123456789".find(word[:1]) >= 0 and word:
            raise _Truncated(_MISSING)
        raise _Invalid()
