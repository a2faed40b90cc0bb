"""OpenAI error bodies, and the Litestar exception handlers that guarantee every failure gets one.

Clients (the openai SDK, lm-eval) branch on the status code and read `error.message`; a bare 500 or a
framework-shaped body makes them retry blindly or crash, so every path maps here.
"""
from __future__ import annotations

import logging
import re
from typing import Optional

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from atom.entrypoints.openai.protocol import ErrorInfo, ErrorResponse
from atom.entrypoints.openai.sse import encode_json
from atom.model_engine.engine_client import EngineError, RequestFailed

log = logging.getLogger("atom.server")

_STATUS_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                 405: "invalid_request_error", 413: "invalid_request_error",
                 503: "service_unavailable_error"}
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")


class OpenAIError(Exception):
    """Raised anywhere in request handling; becomes `{"error": {...}}` with `status`."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, type_: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or _STATUS_TYPES.get(status, "server_error")

    def body(self) -> ErrorResponse:
        return ErrorResponse(ErrorInfo(self.message, self.type, self.param, self.code))


def bad_request(message: str, param: Optional[str] = None, code: Optional[str] = None) -> OpenAIError:
    return OpenAIError(400, message, param, code)


def engine_unavailable(message: str = "the engine core is not running") -> OpenAIError:
    return OpenAIError(503, message, code="engine_dead")


def engine_error(exc: EngineError) -> OpenAIError:
    """A request the engine could not finish: 400 when the core refused its input, 500 when it
    alone failed in a step, 503 when the core is gone."""
    if isinstance(exc, RequestFailed) and exc.rejected:
        return bad_request(str(exc), None, "rejected_by_engine")
    if isinstance(exc, RequestFailed):
        return OpenAIError(500, f"the engine failed this request: {exc}", code="request_failed")
    return engine_unavailable(str(exc))


def error_response(err: OpenAIError) -> Response:
    return Response(encode_json(err.body()), status_code=err.status, media_type="application/json")


def _from_validation(exc: ValidationException) -> OpenAIError:
    extra = exc.extra if isinstance(exc.extra, list) else []
    first = extra[0] if extra and isinstance(extra[0], dict) else {}
    message = str(first.get("message") or exc.detail)
    key = first.get("key")
    unknown = _UNKNOWN_FIELD.search(message)
    if unknown:
        return bad_request(f"Unrecognized request argument supplied: {unknown.group(1)}",
                           unknown.group(1), "unknown_parameter")
    if key in (None, "data") and message in ("'data'", "data"):
        return bad_request("request body is empty; expected a JSON object", None, "invalid_body")
    param = None if key in (None, "data") else str(key)
    text = f"{message} - at `{param}`" if param else message
    return bad_request(text, param, "invalid_value" if ">=" in message or "<=" in message
                       or ">" in message or "<" in message else "invalid_type")


def handle_openai_error(_: Request, exc: OpenAIError) -> Response:
    return error_response(exc)


def handle_http_exception(_: Request, exc: HTTPException) -> Response:
    if isinstance(exc, ValidationException):
        return error_response(_from_validation(exc))
    status = exc.status_code
    if status == 400:
        return error_response(bad_request(str(exc.detail), None, "invalid_json"))
    return error_response(OpenAIError(status, str(exc.detail)))


def handle_unexpected(request: Request, exc: Exception) -> Response:
    """Last resort: log the bug with its traceback, still answer in the OpenAI shape."""
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(OpenAIError(500, f"internal error: {type(exc).__name__}", type_="server_error"))
