"""SSE frames and JSON responses, on one shared msgspec encoder.

Every streamed token leaves through here, so the per-frame cost is paid once per chunk per stream;
msgspec encodes a Struct several times faster than `json.dumps` on a dict and reuses its buffer.
"""
from __future__ import annotations

from typing import Any

import msgspec
from litestar import Response

_ENCODER = msgspec.json.Encoder()

DONE_FRAME = b"data: [DONE]\n\n"

# No proxy may cache or buffer a stream: each frame is a token the client is waiting for.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def encode_json(obj: Any) -> bytes:
    """The JSON body shared by SSE frames and plain responses."""
    return _ENCODER.encode(obj)


def data_frame(obj: Any) -> bytes:
    """`data: <json>\\n\\n` — one OpenAI streaming chunk."""
    return b"data: " + _ENCODER.encode(obj) + b"\n\n"


def event_frame(event: str, obj: Any) -> bytes:
    """`event: <name>\\ndata: <json>\\n\\n` — the Anthropic-style named event."""
    return b"event: " + event.encode() + b"\ndata: " + _ENCODER.encode(obj) + b"\n\n"


def json_response(obj: object, status: int = 200) -> Response:
    return Response(encode_json(obj), status_code=status, media_type="application/json")
