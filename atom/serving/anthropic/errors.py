"""/v1/messages answers every failure in Anthropic's error shape."""
from __future__ import annotations

from litestar import Request, Response

from atom.serving.anthropic.protocol import AnthropicErrorInfo, AnthropicErrorResponse
from atom.serving.common.errors import OpenAIError, as_openai_error, without_paths
from atom.serving.common.sse import encode_json

# Anthropic's error types by status; its SDKs show `error.message` and branch on the status.
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                    413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_body(err: OpenAIError) -> AnthropicErrorResponse:
    """Anthropic names the field as a prefix of the message (`messages.0.content: ...`)."""
    kind = _ANTHROPIC_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    message = f"{err.param}: {err.message}" if err.param else err.message
    return AnthropicErrorResponse(AnthropicErrorInfo(kind, without_paths(message)))


def handle_anthropic_error(request: Request, exc: Exception) -> Response:
    """/v1/messages answers every failure in Anthropic's shape."""
    err = as_openai_error(request, exc)
    return Response(encode_json(anthropic_body(err)), status_code=err.status,
                    media_type="application/json")
