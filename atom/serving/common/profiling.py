"""POST /start_profile and /stop_profile: the torch profiler in the engine core, capped.

A trace grows the core's memory for as long as it runs and lands on disk when it stops, so each
start is bounded twice from config: the server stops a trace itself after `server.profile_max_s`,
and refuses a start (507) while the trace directory already holds `server.profile_max_dir_bytes`.
Both routes sit behind the API key like every route but /health (app.py's guard).
"""
from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Optional

from litestar import Response, post
from litestar.handlers import HTTPRouteHandler

from atom.config.schema import Config
from atom.serving.common.errors import OpenAIError, bad_request, engine_unavailable
from atom.serving.common.sse import json_response

log = logging.getLogger("atom.server")

_DEFAULT_STOP_TIMEOUT_S = 300.0
_START_TIMEOUT_S = 60.0


def stop_timeout(cfg: Config) -> float:
    if cfg.server.stop_profile_timeout_s is not None:
        return cfg.server.stop_profile_timeout_s
    return float(os.environ.get("ATOM_PROFILER_TIMEOUT", _DEFAULT_STOP_TIMEOUT_S))


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).stat().st_size
            except OSError:
                pass
    return total


class ProfileControl:
    """One per app: the running trace's auto-stop timer."""

    def __init__(self, cfg: Config, client: Any) -> None:
        self.cfg = cfg
        self.client = client
        self._auto_stop: Optional[asyncio.TimerHandle] = None
        self._stopping: Optional[asyncio.Future] = None
        self._lock = asyncio.Lock()

    async def start(self) -> Response:
        trace_dir = self._trace_dir()
        cap = self.cfg.server.profile_max_dir_bytes
        used = await asyncio.get_running_loop().run_in_executor(None, dir_bytes, trace_dir)
        if used >= cap:
            raise OpenAIError(507, f"the trace directory holds {used} bytes, at or over its cap of "
                              f"{cap} (server.profile_max_dir_bytes); remove old traces first",
                              None, "profiler_dir_full")
        await self._call("start_profile", _START_TIMEOUT_S)
        if self._auto_stop is None:  # a start while tracing must not push the deadline back
            limit = self.cfg.server.profile_max_s
            self._auto_stop = asyncio.get_running_loop().call_later(limit, self._spawn_stop, limit)
        return json_response({"status": "ok", "profiler_dir": trace_dir})

    async def stop(self) -> Response:
        trace_dir = self._trace_dir()
        self._cancel_auto_stop()
        await self._call("stop_profile", stop_timeout(self.cfg))
        return json_response({"status": "ok", "profiler_dir": trace_dir})

    def _spawn_stop(self, limit: float) -> None:
        self._auto_stop = None
        self._stopping = asyncio.ensure_future(self._stop_by_timer(limit))  # held: not GC'd

    async def _stop_by_timer(self, limit: float) -> None:
        log.warning("profiler ran for %.0f s (server.profile_max_s): stopping it", limit)
        try:
            await self._call("stop_profile", stop_timeout(self.cfg))
        except OpenAIError as exc:
            log.error("automatic stop_profile failed: %s", exc.message)

    def _cancel_auto_stop(self) -> None:
        if self._auto_stop is not None:
            self._auto_stop.cancel()
            self._auto_stop = None

    def _trace_dir(self) -> str:
        trace_dir = self.cfg.profiler.torch_profiler_dir
        if not trace_dir:
            raise bad_request("profiling needs a trace directory: start the server with "
                              "--torch-profiler-dir or ATOM_TORCH_PROFILER_DIR", None,
                              "profiler_disabled")
        return trace_dir

    async def _call(self, op: str, timeout_s: float) -> None:
        if not self.client.alive:
            raise engine_unavailable()
        async with self._lock:  # a stop racing the timer's stop would trace twice
            try:
                await self.client.call(op, timeout_s)
            except asyncio.TimeoutError as exc:
                raise OpenAIError(503, f"{op} did not finish within {timeout_s} s "
                                  "(raise ATOM_PROFILER_TIMEOUT)", None, "profiler_timeout") from exc
            except RuntimeError as exc:
                raise bad_request(f"{op} failed: {exc}", None, "profiler_error") from exc

    def close(self) -> None:
        self._cancel_auto_stop()


def profile_handlers(control: ProfileControl) -> list[HTTPRouteHandler]:
    @post("/start_profile", status_code=200)
    async def start_profile() -> Response:
        return await control.start()

    @post("/stop_profile", status_code=200)
    async def stop_profile() -> Response:
        return await control.stop()

    return [start_profile, stop_profile]
