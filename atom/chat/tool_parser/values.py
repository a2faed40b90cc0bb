"""Typing a call's argument values against the declared schema.

Tag formats (Qwen, GLM, MiniMax) write every value as text, and models write JSON formats' values
in the spellings their chat templates put in history (Qwen3.5 renders `None`, `True`, Python dict
literals): only the request's schema says what `42` or `None` is. A string value is coerced to
the declared type when it reads as one (`None`/`null`/`none`/`nil` for a nullable parameter,
`True`/`false` for a boolean, `"42"` for an integer, a JSON or Python-literal object or array);
one that does not stays the string it was, and a value the schema does not type is left alone:
a guess would make the same call's arguments depend on how the value happened to look.
"""
from __future__ import annotations

import ast
import json
import math
from typing import Any, Mapping

from atom.chat.tool_parser.region import ParsedCall

# Type names schemas write that JSON Schema does not have, read as the type they mean.
_ALIASES = {"float": "number", "double": "number", "int": "integer", "bool": "boolean",
            "dict": "object", "list": "array", "str": "string"}
_NULLS = frozenset({"none", "null", "nil"})
_BOOLS = {"true": True, "false": False}
_WRAPPERS = ("arguments", "input")
_MISS = object()


def typed_arguments(call: ParsedCall, schema: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    args = _unwrapped(call.arguments, props)
    return {key: coerce(value, props.get(key)) if isinstance(value, str) else value
            for key, value in args.items()}


def _unwrapped(args: dict[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
    """A lone `arguments`/`input` parameter holding an object is the arguments themselves (the
    DeepSeek-V4 template writes history that way), unless the tool declares that parameter."""
    if len(args) != 1:
        return args
    key, value = next(iter(args.items()))
    if key not in _WRAPPERS or key in props:
        return args
    if isinstance(value, str):
        value = _literal(value)
    return value if isinstance(value, dict) else args


def coerce(raw: str, prop: Any) -> Any:
    types = _types(prop)
    if raw.strip().lower() in _NULLS and _nullable(prop, types):
        return None
    if not types or "string" in types:
        return raw
    for kind in types:
        value = _as(kind, raw.strip())
        if value is not _MISS:
            return value
    return raw


def _as(kind: str, text: str) -> Any:
    if kind == "boolean":
        return _BOOLS.get(text.lower(), _MISS)
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            return _MISS
    if kind == "number":
        return _number(text)
    if kind in ("object", "array"):
        value = _literal(text)
        return value if isinstance(value, dict if kind == "object" else list) else _MISS
    return _MISS


def _number(text: str) -> Any:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        try:
            value = float(text)
        except ValueError:
            return _MISS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return _MISS
    return value


def _literal(text: str) -> Any:
    """JSON first; then a Python literal (`{'k': 'v'}`, `[True, None]`), never evaluated code."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _MISS


def _nullable(prop: Any, types: tuple[str, ...]) -> bool:
    return "null" in types or (isinstance(prop, Mapping) and prop.get("nullable") is True)


def _types(prop: Any) -> tuple[str, ...]:
    if not isinstance(prop, Mapping):
        return ()
    t = prop.get("type")
    if isinstance(t, str):
        return (_ALIASES.get(t, t),)
    if isinstance(t, list):
        return tuple(_ALIASES.get(x, x) for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf"):
        if isinstance(prop.get(key), list):
            return tuple(x for p in prop[key] for x in _types(p))
    return ()
