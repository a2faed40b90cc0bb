"""Small local servers, one per protocol, that stream tokens at a known rate.

Each runs an aiohttp app on 127.0.0.1 in its own thread (the benchmark under test owns the main
thread's event loop). Token i of a response is the word `tok<i>`, so the test tokenizer counts
exactly one token per word; `tokens_per_chunk` > 1 merges tokens into one frame the way a loaded
server does, which is what the ITL/TPOT merge factor must reveal.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from aiohttp import web

PROTOCOL_PATHS = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "tgi": "/generate_stream",
    "trt": "/v2/models/ensemble/generate_stream",
    "mii": "/mii/benchmark",
}


@dataclass
class Behavior:
    token_interval_s: float = 0.002
    tokens_per_chunk: int = 1
    report_usage: bool = True
    ttft_s: float = 0.0  # extra delay before the first token
    mtp_stats: bool = False  # serve /debug/mtp_stats with counters that grow per request
    fail_status: Optional[int] = None  # answer every generation request with this status
    trt_cumulative: bool = False  # TRT-LLM: send the whole text so far in each event


@dataclass
class Record:
    payloads: list[dict[str, Any]] = field(default_factory=list)
    control: list[str] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    forwards: int = 0


def _words(n: int) -> list[str]:
    return [f"tok{i} " for i in range(n)]


def _chunks(n: int, per: int) -> list[str]:
    words = _words(n)
    return ["".join(words[i:i + per]) for i in range(0, n, per)]


class FakeServer:
    """`with FakeServer("tgi") as s: s.base_url ...`"""

    def __init__(self, protocol: str, behavior: Optional[Behavior] = None) -> None:
        self.protocol = protocol
        self.behavior = behavior or Behavior()
        self.record = Record()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def path(self) -> str:
        return PROTOCOL_PATHS[self.protocol]

    def __enter__(self) -> "FakeServer":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        handler = getattr(self, f"_handle_{self.protocol}")
        app.router.add_post(self.path, self._generation(handler))
        app.router.add_post("/start_profile", self._control("start_profile"))
        app.router.add_post("/stop_profile", self._control("stop_profile"))
        if self.behavior.mtp_stats:
            app.router.add_get("/debug/mtp_stats", self._mtp_stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def _control(self, name: str):
        async def handle(request: web.Request) -> web.Response:
            self.record.control.append(name)
            return web.json_response({"status": "ok"})
        return handle

    async def _mtp_stats(self, request: web.Request) -> web.Response:
        r = self.record
        return web.json_response({"total_draft_tokens": r.draft_tokens,
                                  "total_accepted_tokens": r.accepted_tokens,
                                  "total_forwards": r.forwards})

    def _generation(self, handler):
        async def handle(request: web.Request) -> web.StreamResponse:
            payload = await request.json()
            self.record.payloads.append(payload)
            if self.behavior.fail_status:
                return web.json_response({"error": {"message": "boom"}}, status=self.behavior.fail_status)
            r = self.record
            r.in_flight += 1
            r.peak_in_flight = max(r.peak_in_flight, r.in_flight)
            try:
                return await handler(request, payload)
            finally:
                r.in_flight -= 1
        return handle

    async def _sse(self, request: web.Request, events: list[tuple[int, Any]]) -> web.StreamResponse:
        """Writes events at the token rate; a merged chunk waits for all the tokens it holds."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        b = self.behavior
        await asyncio.sleep(b.ttft_s)
        for i, (n_tokens, event) in enumerate(events):
            if i > 0 and n_tokens:
                await asyncio.sleep(b.token_interval_s * n_tokens)
            body = event if isinstance(event, str) else json.dumps(event)
            await resp.write(f"data: {body}\n\n".encode())
        await resp.write_eof()
        return resp

    def _count_spec(self, n: int) -> None:
        r = self.record
        r.forwards += n // 2 or 1
        r.draft_tokens += 2 * (n // 2 or 1)
        r.accepted_tokens += n - (n // 2 or 1)

    async def _handle_completions(self, request: web.Request, payload: dict) -> web.StreamResponse:
        return await self._openai(request, payload, lambda t: {"choices": [{"index": 0, "text": t}]})

    async def _handle_chat(self, request: web.Request, payload: dict) -> web.StreamResponse:
        return await self._openai(request, payload,
                                  lambda t: {"choices": [{"index": 0, "delta": {"content": t}}]})

    async def _openai(self, request: web.Request, payload: dict, frame) -> web.StreamResponse:
        n = int(payload["max_tokens"])
        self._count_spec(n)
        per = self.behavior.tokens_per_chunk
        events: list[tuple[int, Any]] = [(0, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
        chunks = _chunks(n, per)
        events += [(len(c.split()), frame(c)) for c in chunks]
        if self.behavior.report_usage and (payload.get("stream_options") or {}).get("include_usage"):
            events.append((0, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}}))
        events.append((0, "[DONE]"))
        return await self._sse(request, events)

    async def _handle_tgi(self, request: web.Request, payload: dict) -> web.StreamResponse:
        n = int(payload["parameters"]["max_new_tokens"])
        words = _words(n)
        events = []
        for i, w in enumerate(words):
            last = i == n - 1
            events.append((1, {"token": {"id": i, "text": w, "logprob": -0.1, "special": False},
                               "generated_text": "".join(words) if last else None,
                               "details": {"finish_reason": "length", "generated_tokens": n} if last else None}))
        return await self._sse(request, events)

    async def _handle_trt(self, request: web.Request, payload: dict) -> web.StreamResponse:
        n = int(payload["max_tokens"])
        words, events = _words(n), []
        for i in range(n):
            text = "".join(words[: i + 1]) if self.behavior.trt_cumulative else words[i]
            events.append((1, {"model_name": "ensemble", "text_output": text}))
        return await self._sse(request, events)

    async def _handle_mii(self, request: web.Request, payload: dict) -> web.Response:
        n = int(payload["max_new_tokens"])
        await asyncio.sleep(self.behavior.ttft_s + self.behavior.token_interval_s * n)
        return web.json_response([{"generated_text": "".join(_words(n)), "generated_length": n,
                                   "prompt_length": 1, "finish_reason": "length"}])


def wait_until(predicate, timeout: float = 5.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False
