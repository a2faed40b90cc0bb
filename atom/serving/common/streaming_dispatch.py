"""Delivery under load: one wake-up per engine step, one unread chunk per stream, and the frame clock.

`StreamBatchDispatcher` is handed a whole engine step from the IPC thread in a single
`call_soon_threadsafe`, then fans it out to per-request `StreamOutputCollector`s on the event loop.
A collector holds at most one unread chunk per choice: output arriving behind an unread chunk merges
into it, so a consumer that falls behind catches up in one read instead of queueing frames, and one
that keeps up sees exactly one chunk per step — nothing is held back waiting for more.

`SilenceWatchdog` times the gap before every SSE frame (after the first: the wait for the first frame
is admission and prefill, which `atom:requests_waiting` already reports) and exposes the age of the
oldest open gap; `client_stream` is the one exit every frame passes through.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator, Callable, Optional

from atom.model_engine.engine_client import RequestFailed
from atom.model_engine.messages import EngineStats
from atom.model_engine.output_processor import RequestOutput

log = logging.getLogger("atom.server")


def merge_into(pending: RequestOutput, new: RequestOutput) -> None:
    """Fold `new` into an unread chunk: deltas concatenate, state comes from the newest."""
    pending.text += new.text
    pending.token_ids.extend(new.token_ids)
    if new.logprobs:
        pending.logprobs = (pending.logprobs or []) + list(new.logprobs)
    pending.finished = new.finished
    pending.finish_reason = new.finish_reason
    pending.num_output_tokens = new.num_output_tokens
    pending.first_token_time = new.first_token_time
    pending.finish_time = new.finish_time
    pending.num_cached_tokens = new.num_cached_tokens


class StreamOutputCollector:
    """Per-request mailbox; one slot per choice index."""

    __slots__ = ("_pending", "_waiter", "_error", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._pending: dict[int, RequestOutput] = {}
        self._waiter: Optional[asyncio.Future] = None
        self._error: Optional[BaseException] = None
        self._loop = loop

    def put(self, index: int, out: RequestOutput) -> None:
        held = self._pending.get(index)
        if held is None:
            self._pending[index] = out
        else:
            merge_into(held, out)
        self._wake()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def get(self) -> list[tuple[int, RequestOutput]]:
        """Everything unread, oldest choice first; waits only when there is nothing."""
        while not self._pending:
            if self._error is not None:
                raise self._error
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items = sorted(self._pending.items()) if len(self._pending) > 1 else list(self._pending.items())
        self._pending = {}
        return items


class StreamBatchDispatcher:
    """Routes each engine step's outputs to their collectors; owned by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_stats: Optional[Callable[[EngineStats], None]] = None) -> None:
        self._loop = loop
        self._routes: dict[str, tuple[StreamOutputCollector, int]] = {}
        self._on_stats = on_stats
        self.steps_dispatched = 0

    def register(self, request_id: str, collector: StreamOutputCollector, index: int = 0) -> None:
        self._routes[request_id] = (collector, index)

    def unregister(self, request_id: str) -> None:
        self._routes.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._routes)

    # called from the IPC thread: the only cross-thread hop, once per engine step
    def post(self, outputs: list[RequestOutput], stats: Optional[EngineStats]) -> None:
        self._loop.call_soon_threadsafe(self.dispatch, outputs, stats)

    def post_failure(self, error: BaseException) -> None:
        self._loop.call_soon_threadsafe(self.fail_all, error)

    def dispatch(self, outputs: list[RequestOutput], stats: Optional[EngineStats] = None) -> None:
        self.steps_dispatched += 1
        routes = self._routes
        for out in outputs:
            route = routes.get(out.request_id)
            if route is None:
                continue
            if out.finished:
                del routes[out.request_id]
            if out.error is not None:
                route[0].fail(RequestFailed(out.error, out.rejected))
            else:
                route[0].put(route[1], out)
        if stats is not None and self._on_stats is not None:
            self._on_stats(stats)

    def fail_all(self, error: BaseException) -> None:
        routes, self._routes = self._routes, {}
        for collector, _ in routes.values():
            collector.fail(error)


class SilenceWatchdog:
    """When each open stream last sent a frame; no timers, just a timestamp per frame."""

    def __init__(self, log_threshold_s: float = 30.0) -> None:
        self._last: dict[str, float] = {}
        self._threshold = log_threshold_s
        self.longest_recovered = 0.0  # largest gap seen so far (for tests and benchmarks)

    def frame(self, request_id: str, now: float) -> None:
        last = self._last.get(request_id)
        if last is not None:
            gap = now - last
            if gap > self.longest_recovered:
                self.longest_recovered = gap
            if gap > self._threshold:
                log.warning("stream %s was silent for %.1f s before this frame", request_id, gap)
        self._last[request_id] = now

    def close(self, request_id: str) -> None:
        self._last.pop(request_id, None)

    def longest_silence(self, now: Optional[float] = None) -> float:
        """Age of the oldest gap in flight: 0 when every stream was just served."""
        if not self._last:
            return 0.0
        return max(0.0, (now if now is not None else time.monotonic()) - min(self._last.values()))


async def client_stream(frames: AsyncIterator[bytes], request_id: str,
                        watchdog: SilenceWatchdog) -> AsyncIterator[bytes]:
    """The single exit of every SSE frame: timestamps each one for the watchdog."""
    clock = time.monotonic
    try:
        async for frame in frames:
            watchdog.frame(request_id, clock())
            yield frame
    finally:
        watchdog.close(request_id)
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            await aclose()
