"""The Litestar app factory: routes, auth, error mapping and the engine hookup at startup.

Nothing is built at import time; `create_app(cfg, client, tokenizer=...)` returns a fresh app whose
state lives in one ServerContext.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from typing import Any, Optional

from litestar import Litestar, Request, Response, Router, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.params import JSONBody

from atom.config.schema import Config
from atom.entrypoints.openai.chat_reader import ChatReaderFactory, passthrough_factory
from atom.entrypoints.openai.chat_render import ChatRenderer, TemplateChatRenderer
from atom.entrypoints.openai.context import ServerContext, model_aliases, served_model_name
from atom.entrypoints.openai.errors import (OpenAIError, bad_request, engine_unavailable,
                                            handle_http_exception, handle_openai_error,
                                            handle_unexpected)
from atom.entrypoints.openai.metrics import CONTENT_TYPE, AtomMetricsExporter
from atom.entrypoints.openai.protocol import (ChatCompletionRequest, CompletionRequest,
                                              HealthResponse, ModelCard, ModelList)
from atom.entrypoints.openai.serving_chat import OpenAIServingChat
from atom.entrypoints.openai.serving_completion import OpenAIServingCompletion, json_response
from atom.entrypoints.openai.streaming_dispatch import SilenceWatchdog, StreamBatchDispatcher

log = logging.getLogger("atom.server")

_DEFAULT_PROFILE_TIMEOUT_S = 300.0


def _api_key_guard(key: Optional[str]):
    """401 unless `Authorization: Bearer <key>` matches; a no-op when no key is configured."""
    expected = f"Bearer {key}".encode() if key else None

    def guard(connection: ASGIConnection, _: BaseRouteHandler) -> None:
        if expected is None:
            return
        got = connection.headers.get("authorization", "").encode()
        if not hmac.compare_digest(got, expected):
            raise OpenAIError(401, "Incorrect API key provided", None, "invalid_api_key")

    return guard


def _profile_timeout(cfg: Config) -> float:
    if cfg.server.stop_profile_timeout_s is not None:
        return cfg.server.stop_profile_timeout_s
    return float(os.environ.get("ATOM_PROFILER_TIMEOUT", _DEFAULT_PROFILE_TIMEOUT_S))


def create_app(cfg: Config, client: Any, *, tokenizer: Any = None,
               chat_renderer: Optional[ChatRenderer] = None,
               chat_reader_factory: Optional[ChatReaderFactory] = None,
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
    from atom.entrypoints.openai.serving_messages import messages_handler
    from atom.entrypoints.openai.tool_parser.chat_io import build_chat_io

    chat_io = build_chat_io(cfg, tokenizer)
    if chat_renderer is None and chat_reader_factory is None:
        chat_renderer, chat_reader_factory = chat_io.render, chat_io.reader
    chat = OpenAIServingChat(ctx, chat_renderer or TemplateChatRenderer(tokenizer),
                             chat_reader_factory or passthrough_factory)
    completion = OpenAIServingCompletion(ctx)

    @post("/chat/completions", status_code=200, summary="Chat completion")
    async def chat_completions(data: JSONBody[ChatCompletionRequest], request: Request) -> Response:
        return await chat.create(data, request, time.perf_counter())

    @post("/completions", status_code=200, summary="Text completion")
    async def completions(data: JSONBody[CompletionRequest], request: Request) -> Response:
        return await completion.create(data, request, time.perf_counter())

    @get("/models", summary="List the loaded model")
    async def models() -> ModelList:
        return ModelList([ModelCard(name, ctx.created, root=cfg.model.path or cfg.model.name,
                                    max_model_len=ctx.max_model_len or None)])

    @get("/health", summary="200 while the engine core runs and answers; 503 once it is gone or "
                            "silent past server.core_silence_timeout_s")
    async def health() -> Response:
        if not client.alive:
            raise engine_unavailable("the engine core is not running")
        if client.stalled:
            raise OpenAIError(503, f"the engine core has not answered for {client.silence_s():.1f} s",
                              code="engine_stalled")
        return json_response(HealthResponse())

    @get("/metrics", summary="Prometheus metrics (atom:*)", include_in_schema=False)
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def _profile(op: str, timeout_s: float) -> Response:
        if not cfg.profiler.torch_profiler_dir:
            raise bad_request("profiling needs a trace directory: start the server with "
                              "--torch-profiler-dir or ATOM_TORCH_PROFILER_DIR", None, "profiler_disabled")
        if not client.alive:
            raise engine_unavailable()
        try:
            await client.call(op, timeout_s)
        except asyncio.TimeoutError as exc:
            raise OpenAIError(503, f"{op} did not finish within {timeout_s} s "
                              "(raise ATOM_PROFILER_TIMEOUT)", None, "profiler_timeout") from exc
        except RuntimeError as exc:
            raise bad_request(f"{op} failed: {exc}", None, "profiler_error") from exc
        return json_response({"status": "ok", "profiler_dir": cfg.profiler.torch_profiler_dir})

    @post("/start_profile", status_code=200, summary="Start the torch profiler in the engine")
    async def start_profile() -> Response:
        return await _profile("start_profile", 60.0)

    @post("/stop_profile", status_code=200, summary="Stop the profiler and write traces")
    async def stop_profile() -> Response:
        return await _profile("stop_profile", _profile_timeout(cfg))

    async def on_startup() -> None:
        ctx.dispatcher = StreamBatchDispatcher(asyncio.get_running_loop())
        client.attach(ctx.dispatcher)

    async def on_shutdown() -> None:
        if ctx.dispatcher is not None:
            ctx.dispatcher.fail_all(RuntimeError("server shutting down"))
        if close_client_on_shutdown:
            await asyncio.get_running_loop().run_in_executor(None, client.close)

    v1 = Router("/v1", route_handlers=[chat_completions, completions, models,
                                       messages_handler(ctx, chat_io)],
                guards=[_api_key_guard(cfg.server.api_key)])
    from atom.entrypoints.openai.serving_tokenize import tokenize_handlers

    app = Litestar(
        route_handlers=[v1, health, metrics_route, start_profile, stop_profile,
                        *tokenize_handlers(ctx, chat_io, [_api_key_guard(cfg.server.api_key)])],
        exception_handlers={OpenAIError: handle_openai_error, HTTPException: handle_http_exception,
                            Exception: handle_unexpected},
        on_startup=[on_startup], on_shutdown=[on_shutdown],
        openapi_config=OpenAPIConfig(title="atom OpenAI-compatible API", version="1.0.0"),
        logging_config=None, debug=False)
    app.state.ctx = ctx
    return app
