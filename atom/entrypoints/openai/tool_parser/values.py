"""Typing the raw text of tag-format arguments against the declared schema.

Tag formats (Qwen, GLM, MiniMax) write every value as text; only the request's schema says
whether `42` is a number or a string. A value the schema does not type stays a string: a guess
would make the same call's arguments depend on how the value happened to look.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from atom.entrypoints.openai.tool_parser.region import ParsedCall

_JSON_TYPES = ("integer", "number", "boolean", "object", "array", "null")


def typed_arguments(call: ParsedCall, schema: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    out: dict[str, Any] = {}
    for key, value in call.arguments.items():
        if key in call.raw_keys and isinstance(value, str):
            out[key] = coerce(value, props.get(key))
        else:
            out[key] = value
    return out


def coerce(raw: str, prop: Any) -> Any:
    types = _types(prop)
    if not types or "string" in types:
        return raw
    if any(t in _JSON_TYPES for t in types):
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, ValueError):
            return raw
    return raw


def _types(prop: Any) -> tuple[str, ...]:
    if not isinstance(prop, Mapping):
        return ()
    t = prop.get("type")
    if isinstance(t, str):
        return (t,)
    if isinstance(t, list):
        return tuple(x for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf"):
        if isinstance(prop.get(key), list):
            return tuple(x for p in prop[key] for x in _types(p))
    return ()
