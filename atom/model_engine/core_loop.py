"""The engine-core process: a busy loop that owns the model and never touches text or HTTP.

Each turn drains every pending request/abort/control message, runs one `step()`, and sends one
StepBatch carrying all of that step's outputs and the stats after it — so the API process pays one
wake-up per step however many streams advanced. Aborts are applied before the step runs, which is
what frees a disconnected client's KV blocks in the same step.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

import msgspec
import zmq

from atom.config.schema import Config
from atom.model_engine.core_ipc import (AbortRequests, AddRequests, ControlCall, ControlReply,
                                        Heartbeat, StepBatch,
                                        to_core_decoder)
from atom.model_engine.messages import EngineStats, StepOutput

log = logging.getLogger("atom.core")

_IDLE_POLL_MS = 500  # how often an idle core checks that its parent is still there


class _StatusLine:
    """The periodic engine-status line: throughput since the last line, queue depths, KV usage and
    prefix-cache hit rate. Quiet while the engine idles, so logs do not fill with zeros."""

    def __init__(self, interval_s: float, enabled: bool) -> None:
        self._interval = interval_s
        self._enabled = enabled
        self._last_t = time.monotonic()
        self._last: Optional[EngineStats] = None

    def maybe_log(self, s: EngineStats) -> None:
        now = time.monotonic()
        if not self._enabled or now - self._last_t < self._interval:
            return
        prev, dt = self._last, now - self._last_t
        prompt = s.prompt_tokens_total - (prev.prompt_tokens_total if prev else 0)
        gen = s.generation_tokens_total - (prev.generation_tokens_total if prev else 0)
        self._last_t, self._last = now, msgspec.structs.replace(s)
        if prompt == 0 and gen == 0 and s.num_running == 0 and s.num_waiting == 0:
            return
        log.info("Engine status: prompt throughput %.1f tok/s, generation throughput %.1f tok/s, "
                 "running %d reqs, waiting %d reqs, KV cache usage %.1f%%, prefix cache hit rate %.1f%%",
                 prompt / dt, gen / dt, s.num_running, s.num_waiting, 100 * s.kv_usage,
                 100 * s.prefix_hit_rate)


class CoreLoop:
    def __init__(self, cfg: Config, core: Any, pull: zmq.Socket, push: zmq.Socket, parent_pid: int) -> None:
        self.core = core
        self._pull, self._push = pull, push
        self._parent = parent_pid
        self._decode = to_core_decoder().decode
        self._encode = msgspec.msgpack.Encoder().encode
        self._status = _StatusLine(cfg.runtime.throughput_log_interval, cfg.runtime.enable_log_stats)
        self._running = True
        self._rejected: list[StepOutput] = []  # requests refused since the last StepBatch
        self._heartbeat_s = min(cfg.server.core_silence_timeout_s / 4, _IDLE_POLL_MS / 1000) \
            if cfg.server.core_silence_timeout_s > 0 else 0.0
        self._last_sent = time.monotonic()

    def send(self, msg: Any) -> None:
        self._push.send(self._encode(msg), copy=False)
        self._last_sent = time.monotonic()

    def run(self) -> None:
        while self._running:
            busy = self.core.has_unfinished()
            got = self._drain(0 if busy else self._idle_wait_ms())
            if not self._running or os.getppid() != self._parent:
                break
            rejected, self._rejected = self._rejected, []
            if self.core.has_unfinished():
                outputs = self.core.step()
                stats = self.core.stats()
                self.send(StepBatch(rejected + outputs, stats))
                self._status.maybe_log(stats)
            elif got or rejected:  # aborts that emptied the engine: publish the freed state
                self.send(StepBatch(rejected, self.core.stats()))
            elif self._heartbeat_s and time.monotonic() - self._last_sent >= self._heartbeat_s:
                self.send(Heartbeat())  # an idle core still answers: the API side sees a stall

    def _idle_wait_ms(self) -> int:
        return int(1000 * self._heartbeat_s) if self._heartbeat_s else _IDLE_POLL_MS

    def _drain(self, timeout_ms: int) -> bool:
        if not self._pull.poll(timeout_ms):
            return False
        while self._running:
            try:
                frame = self._pull.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                msg = self._decode(frame.buffer)
            except msgspec.DecodeError as exc:
                self._reject_undecodable(frame.buffer, str(exc))
                continue
            self._handle(msg)
        return True

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, AddRequests):
            for req in msg.requests:
                self._add(req)
        elif isinstance(msg, AbortRequests):
            self.core.abort_requests(msg.request_ids)
        elif isinstance(msg, ControlCall):
            self._control(msg)

    def _add(self, req: Any) -> None:
        """A request the core refuses is failed alone, in the next StepBatch."""
        try:
            self.core.add_request(req)
        except Exception as exc:
            self._reject(req.request_id, str(exc), len(req.prompt_token_ids))

    def _reject(self, request_id: str, why: str, num_prompt_tokens: int = 0) -> None:
        log.warning("request %s rejected: %s", request_id, why)
        self._rejected.append(StepOutput(
            request_id=request_id, new_token_ids=[], finished=True, finish_reason="error",
            num_prompt_tokens=num_prompt_tokens, error=why, rejected=True))

    def _reject_undecodable(self, buf: Any, why: str) -> None:
        """Requests whose fields fail the core's own checks (SamplingParams validates on decode)
        are refused by id, so their callers hear back; anything else is only logged."""
        try:
            raw = msgspec.msgpack.decode(buf)
            ids = [r["request_id"] for r in raw["requests"]] if raw.get("type") == "add" else []
        except Exception:
            ids = []
        if not ids:
            log.error("dropped an undecodable message: %s", why)
        for rid in ids:
            self._reject(str(rid), why)

    def _control(self, call: ControlCall) -> None:
        try:
            if call.op == "shutdown":
                self._running = False
            elif call.op == "start_profile":
                self.core.start_profile()
            elif call.op == "stop_profile":
                self.core.stop_profile()
            else:
                raise ValueError(f"unknown control op {call.op!r}")
            self.send(ControlReply(call.call_id, True))
        except Exception as exc:  # reported to the caller, the loop carries on
            self.send(ControlReply(call.call_id, False, f"{type(exc).__name__}: {exc}"))
