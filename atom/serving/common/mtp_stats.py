"""`GET /debug/mtp_stats`: the core's speculative-decoding counters as the spec names them.

Read from the latest EngineStats the core sent (no round trip to the core); `enabled: false`
when speculative decoding is off, which benchmark_serving reads as "print nothing".
"""
from __future__ import annotations

from typing import Callable

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

from atom.config.schema import Config
from atom.model_engine.messages import EngineStats
from atom.serving.common.sse import encode_json
from atom.spec_decode.stats import mtp_stats_json


def mtp_stats_handler(cfg: Config, stats: Callable[[], EngineStats]) -> HTTPRouteHandler:
    method = cfg.specdecode.method

    @get("/debug/mtp_stats")
    async def mtp_stats() -> Response:
        return Response(encode_json(mtp_stats_json(stats(), method)), media_type="application/json")

    return mtp_stats
