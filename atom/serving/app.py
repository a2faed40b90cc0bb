"""The Litestar app factory: routes, auth, error mapping and the engine hookup at startup.

Nothing is built at import time; `create_app(cfg, client, tokenizer=...)` returns a fresh app whose
state lives in one ServerContext.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any, Optional

from litestar import Litestar, Request, Response, Router, get, post
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from atom.chat.chat_io import build_chat_io
from atom.config.schema import Config
from atom.serving.anthropic.serving_messages import messages_handler
from atom.serving.common.context import ServerContext, model_aliases, served_model_name
from atom.serving.common.errors import OpenAIError, engine_unavailable, handle_error
from atom.serving.common.metrics import CONTENT_TYPE, AtomMetricsExporter
from atom.serving.common.mtp_stats import mtp_stats_handler
from atom.serving.common.profiling import ProfileControl, profile_handlers
from atom.serving.common.request_body import decode_body
from atom.serving.common.sse import encode_json, json_response
from atom.serving.common.streaming_dispatch import SilenceWatchdog, StreamBatchDispatcher
from atom.serving.openai.protocol import (ChatCompletionRequest, CompletionRequest,
                                          HealthResponse, ModelCard, ModelList)
from atom.serving.openai.serving_chat import OpenAIServingChat
from atom.serving.openai.serving_completion import OpenAIServingCompletion
from atom.serving.openai.serving_tokenize import tokenize_handlers
from atom.serving.openapi import openapi_document

log = logging.getLogger("atom.server")


def _presented_keys(connection: ASGIConnection) -> list[bytes]:
    """`Authorization: Bearer <key>` (scheme in any case) or Anthropic clients' `x-api-key`."""
    keys = []
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        keys.append(token.strip().encode())
    if connection.headers.get("x-api-key"):
        keys.append(connection.headers["x-api-key"].strip().encode())
    return keys


def _api_key_guard(key: Optional[str]):
    """401 on every route but the public ones (`opt={"public": True}`: /health) unless a
    presented key matches; a no-op when no key is configured."""
    expected = key.encode() if key else None

    def guard(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
        if expected is None or handler.opt.get("public"):
            return
        if not any(hmac.compare_digest(got, expected) for got in _presented_keys(connection)):
            raise OpenAIError(401, "Incorrect API key provided", None, "invalid_api_key")

    return guard


def create_app(cfg: Config, client: Any, *, tokenizer: Any = None,
               close_client_on_shutdown: bool = True) -> Litestar:
    """An app serving `client` (an EngineClient already started, or a test double)."""
    tokenizer = tokenizer if tokenizer is not None else client.tokenizer
    watchdog = SilenceWatchdog(cfg.server.silence_log_threshold_s)
    name = served_model_name(cfg)
    metrics = AtomMetricsExporter(lambda: client.stats, watchdog.longest_silence, name,
                                  client.silence_s)
    ctx = ServerContext(cfg, client, tokenizer, watchdog, metrics, model_name=name,
                        aliases=model_aliases(cfg))
    # Tool calls and reasoning (cfg.format): template, format and dialect resolved once here.
    chat_io = build_chat_io(cfg, tokenizer)
    chat = OpenAIServingChat(ctx, chat_io)
    completion = OpenAIServingCompletion(ctx)

    @post("/chat/completions", status_code=200)
    async def chat_completions(request: Request) -> Response:
        arrival = time.perf_counter()
        return await chat.create(decode_body(await request.body(), ChatCompletionRequest), request, arrival)

    @post("/completions", status_code=200)
    async def completions(request: Request) -> Response:
        arrival = time.perf_counter()
        return await completion.create(decode_body(await request.body(), CompletionRequest), request,
                                       arrival)

    @get("/models")
    async def models() -> ModelList:
        return ModelList([ModelCard(name, ctx.created, root=name,
                                    max_model_len=ctx.max_model_len or None)])

    openapi = encode_json(openapi_document(bool(cfg.server.api_key)))

    @get(["/openapi.json", "/schema/openapi.json"])
    async def openapi_route() -> Response:
        return Response(openapi, media_type="application/json")

    @get("/health", opt={"public": True})
    async def health() -> Response:
        """200 while the engine core runs and answers; 503 once it is gone or silent past
        server.core_silence_timeout_s."""
        if not client.alive:
            raise engine_unavailable(client.dead_reason)
        if client.stalled:
            raise OpenAIError(503, f"the engine core has not answered for {client.silence_s():.1f} s",
                              code="engine_stalled")
        return json_response(HealthResponse())

    @get("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    profiling = ProfileControl(cfg, client)

    async def on_startup() -> None:
        ctx.dispatcher = StreamBatchDispatcher(asyncio.get_running_loop())
        client.attach(ctx.dispatcher)

    async def on_shutdown() -> None:
        profiling.close()
        if ctx.dispatcher is not None:
            ctx.dispatcher.fail_all(RuntimeError("server shutting down"))
        if close_client_on_shutdown:
            await asyncio.get_running_loop().run_in_executor(None, client.close)

    v1 = Router("/v1", route_handlers=[chat_completions, completions, models,
                                       messages_handler(ctx, chat_io)])
    app = Litestar(
        route_handlers=[v1, health, metrics_route, openapi_route, *profile_handlers(profiling),
                        *tokenize_handlers(ctx, chat_io, []),
                        mtp_stats_handler(cfg, lambda: client.stats)],
        guards=[_api_key_guard(cfg.server.api_key)], exception_handlers={Exception: handle_error},
        on_startup=[on_startup], on_shutdown=[on_shutdown], openapi_config=None,
        logging_config=None, debug=False)
    app.state.ctx = ctx
    return app
