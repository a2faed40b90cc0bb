"""The published OpenAPI document, generated from the same msgspec Structs that decode requests.

Bodies are decoded by request_body.py straight into these types, so every bound, enum and
`additionalProperties: false` below is exactly what a request is checked against; error responses
are documented with the bodies errors.py writes (OpenAI's, and Anthropic's on /v1/messages).
"""
from __future__ import annotations

from typing import Any

import msgspec

from atom.serving.anthropic.protocol import AnthropicErrorResponse, MessagesRequest
from atom.serving.common.errors import ErrorResponse
from atom.serving.openai.protocol import (ChatCompletionRequest, ChatCompletionResponse,
                                          CompletionRequest, CompletionResponse, HealthResponse,
                                          ModelList)

_REF = "#/components/schemas/{name}"
# OpenAPI 3.1 reads an event stream's `schema` as one event: its `data` line(s) and `event` name
# (JSON chunks, and `[DONE]` on the OpenAI routes).
_SSE_EVENT = {"type": "object", "required": ["data", "event"],
              "properties": {"data": {"type": "string"}, "event": {"type": "string"}}}
_ERRORS = {"400": "invalid request", "401": "missing or wrong API key",
           "404": "unknown model or route", "413": "body too large",
           "503": "the engine core is not running"}


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": ref}}


def _errors(error_ref: dict[str, Any], statuses: dict[str, str]) -> dict[str, Any]:
    return {code: {"description": text, "content": _json(error_ref)} for code, text in statuses.items()}


def _generation(summary: str, body: dict[str, Any], ok: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, "content": _json(body)},
        "responses": {"200": {"description": "the result, or an SSE stream when `stream` is true",
                              "content": {**_json(ok), "text/event-stream": {"schema": _SSE_EVENT}}},
                      **_errors(error, _ERRORS)}}}


def openapi_document(api_key_required: bool) -> dict[str, Any]:
    types = [ChatCompletionRequest, ChatCompletionResponse, CompletionRequest, CompletionResponse,
             MessagesRequest, ModelList, HealthResponse, ErrorResponse, AnthropicErrorResponse]
    refs, components = msgspec.json.schema_components(types, ref_template=_REF)
    chat, chat_out, cmpl, cmpl_out, msgs, models, health, err, anthropic_err = refs
    message = {"type": "object", "description": "an Anthropic Message"}
    profile_ok = {"type": "object", "properties": {"status": {"type": "string"},
                                                   "profiler_dir": {"type": "string"}}}
    auth_errors = {"401": _ERRORS["401"]} if api_key_required else {}
    paths = {
        "/v1/chat/completions": _generation("Chat completion", chat, chat_out, err),
        "/v1/completions": _generation("Text completion", cmpl, cmpl_out, err),
        "/v1/messages": _generation("Anthropic Messages API", msgs, message, anthropic_err),
        "/v1/models": {"get": {"summary": "List the loaded model", "responses": {
            "200": {"description": "the served model", "content": _json(models)},
            **_errors(err, auth_errors)}}},
        "/health": {"get": {"summary": "200 while the engine core runs, 503 once it is gone",
                            "security": [], "responses": {
                                "200": {"description": "healthy", "content": _json(health)},
                                **_errors(err, {"503": _ERRORS["503"]})}}},
        "/metrics": {"get": {"summary": "Prometheus metrics (atom:*)", "responses": {
            "200": {"description": "Prometheus text format",
                    "content": {"text/plain": {"schema": {"type": "string"}}}},
            **_errors(err, auth_errors)}}},
    }
    for op, text in (("start_profile", "Start the torch profiler in the engine"),
                     ("stop_profile", "Stop the profiler and write traces")):
        paths[f"/{op}"] = {"post": {"summary": text, "responses": {
            "200": {"description": "done", "content": _json(profile_ok)},
            **_errors(err, {"400": "profiling is not enabled", **auth_errors,
                            "503": "the engine core is not running or did not answer in time",
                            "507": "the trace directory is over its size cap"})}}}
    doc: dict[str, Any] = {"openapi": "3.1.0",
                           "info": {"title": "atom OpenAI-compatible API", "version": "1.0.0"},
                           "paths": paths, "components": {"schemas": components}}
    if api_key_required:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"}}
        doc["security"] = [{"bearer": []}, {"x-api-key": []}]
    return doc
