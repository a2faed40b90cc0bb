"""OpenAI error bodies, and the Litestar exception handlers that guarantee every failure gets one.

Clients (the openai SDK, lm-eval) branch on the status code and read `error.message`; a bare 500 or a
framework-shaped body makes them retry blindly or crash, so every path maps here.
"""
from __future__ import annotations

import logging
import re
from typing import Optional, Union

from litestar import Request, Response
from litestar.exceptions import HTTPException
from msgspec import Struct

from atom.model_engine.engine_client import EngineError, RequestFailed
from atom.serving.common.sse import encode_json

log = logging.getLogger("atom.server")

class ErrorInfo(Struct):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[Union[str, int]] = None


class ErrorResponse(Struct):
    """The error body of every route but /v1/messages (which answers in Anthropic's shape)."""

    error: ErrorInfo


_STATUS_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                 405: "invalid_request_error", 413: "invalid_request_error",
                 503: "service_unavailable_error"}


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
        return ErrorResponse(ErrorInfo(without_paths(self.message), self.type, self.param, self.code))


def bad_request(message: str, param: Optional[str] = None, code: Optional[str] = None) -> OpenAIError:
    return OpenAIError(400, message, param, code)


_ABS_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)")


def without_paths(text: str) -> str:
    """Absolute paths cut to their last part: no error body shows the server's file layout."""
    return _ABS_PATH.sub(r"\1", text)


def public_reason(reason: Optional[str]) -> str:
    """A failure's first line (a traceback's exception line), without paths: what /health and
    error bodies may show anyone (the server's log has the traceback)."""
    lines = [line.strip() for line in (reason or "").splitlines() if line.strip()]
    if not lines:
        return "the engine core is not running"
    return without_paths(lines[-1] if lines[0].startswith("Traceback") else lines[0])


def engine_unavailable(reason: Optional[str] = None) -> OpenAIError:
    return OpenAIError(503, public_reason(reason), code="engine_dead")


def engine_error(exc: EngineError) -> OpenAIError:
    """A request the engine could not finish: 400 when the core refused its input, 500 when it
    alone failed in a step, 503 when the core is gone."""
    reason = public_reason(str(exc))
    if isinstance(exc, RequestFailed) and exc.rejected:
        return bad_request(reason, None, "rejected_by_engine")
    if isinstance(exc, RequestFailed):
        return OpenAIError(500, f"the engine failed this request: {reason}", code="request_failed")
    return engine_unavailable(str(exc))


def error_response(err: OpenAIError) -> Response:
    return Response(encode_json(err.body()), status_code=err.status, media_type="application/json")


def as_openai_error(request: Request, exc: Exception) -> OpenAIError:
    """Any exception as the error it answers with; one not raised on purpose is a logged bug."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, HTTPException):
        if exc.status_code == 400:
            return bad_request(str(exc.detail), None, "invalid_json")
        return OpenAIError(exc.status_code, str(exc.detail))
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return OpenAIError(500, f"internal error: {type(exc).__name__}", type_="server_error")


def handle_error(request: Request, exc: Exception) -> Response:
    return error_response(as_openai_error(request, exc))
