"""Request bodies decoded strictly, straight into their msgspec Struct, or a 400 naming the field.

Strict: a float is never taken for an int (`top_k: 1e23`), a string never for a number, and every
bound in protocol.py holds before the request reaches validation, the template or the core. The
same Structs publish the OpenAPI schema (openapi.py), so what is documented is what is enforced.
"""
from __future__ import annotations

import re
from typing import Optional, TypeVar

import msgspec

from atom.serving.common.errors import OpenAIError, bad_request

T = TypeVar("T")

_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_KEY_AT = re.compile(r" - at `key` in `\$(?P<path>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]+)`")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`")
_BOUND = re.compile(r"[<>]=?|length|matching regex|Invalid enum value|Invalid value")


def decode_body(body: bytes, type_: type[T]) -> T:
    """The request, or an OpenAIError (400) whose `param` is the offending field's path."""
    if not body.strip():
        raise bad_request("request body is empty; expected a JSON object", None, "invalid_body")
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        raise _validation_error(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}", None, "invalid_json") from None
    except RecursionError:
        raise bad_request("the body is nested too deeply", None, "invalid_json") from None


def _field(path: str) -> Optional[str]:
    """`$.a.b[0]` → `a.b[0]`; a dict value (`[...]` to msgspec) is named by its dict."""
    path = path.replace("[...]", "").lstrip(".")
    return path or None


def _join(path: Optional[str], name: str) -> str:
    return f"{path}.{name}" if path else name


def _validation_error(message: str) -> OpenAIError:
    key_at = _KEY_AT.search(message)
    at = key_at or _AT.search(message)
    path = _field(at.group("path")) if at else None
    text = message[: at.start()] if at else message
    unknown = _UNKNOWN.match(text)
    if unknown:
        name = _join(path, unknown.group("name"))
        return bad_request(f"Unrecognized request argument supplied: {name}", name,
                           "unknown_parameter")
    missing = _MISSING.match(text)
    if missing:
        name = _join(path, missing.group("name"))
        return bad_request(f"`{name}` is required", name, "missing_required_parameter")
    where = f" - at `{path}`" if path else ""
    if key_at:
        where = f" - at a key of `{path}`"
    code = "invalid_value" if _BOUND.search(text) else "invalid_type"
    return bad_request(f"{text}{where}", path, code)
