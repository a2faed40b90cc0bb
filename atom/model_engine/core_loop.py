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
import traceback
from typing import Any, Optional

import msgspec
import zmq

from atom.config.schema import Config
from atom.model_engine.core_ipc import (AbortRequests, AddRequests, ControlCall, ControlReply,
                                        CoreFailed, CoreReady, StepBatch, to_core_decoder)
from atom.model_engine.messages import EngineStats

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

    def send(self, msg: Any) -> None:
        self._push.send(self._encode(msg), copy=False)

    def run(self) -> None:
        while self._running:
            busy = self.core.has_unfinished()
            got = self._drain(0 if busy else _IDLE_POLL_MS)
            if not self._running or os.getppid() != self._parent:
                break
            if self.core.has_unfinished():
                outputs = self.core.step()
                stats = self.core.stats()
                self.send(StepBatch(outputs, stats))
                self._status.maybe_log(stats)
            elif got:  # aborts that emptied the engine: publish the freed state
                self.send(StepBatch([], self.core.stats()))

    def _drain(self, timeout_ms: int) -> bool:
        if not self._pull.poll(timeout_ms):
            return False
        while self._running:
            try:
                frame = self._pull.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._handle(self._decode(frame.buffer))
        return True

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, AddRequests):
            for req in msg.requests:
                self.core.add_request(req)
        elif isinstance(msg, AbortRequests):
            self.core.abort_requests(msg.request_ids)
        elif isinstance(msg, ControlCall):
            self._control(msg)

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


def run_core(cfg: Config, in_addr: str, out_addr: str, parent_pid: int) -> None:
    """Process entry point (spawned by EngineClient)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(name)s: %(message)s")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.connect(out_addr)
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    pull.bind(in_addr)  # binds so that every PUSH of the API process (requests, stop aborts) reaches it
    encode = msgspec.msgpack.Encoder().encode
    core = None
    try:
        from atom.builder import build_core, build_tokenizer
        from atom.runner.cpu_threads import cpu_threads

        cfg.runtime.cpu_threads = cpu_threads(cfg.runtime.cpu_threads, serving=True)
        # The model core needs the tokenizer's EOS id; the stand-in cores build what they need.
        tokenizer = build_tokenizer(cfg) if cfg.server.engine_source == "model" else None
        core = build_core(cfg, tokenizer) if tokenizer is not None else build_core(cfg)
        max_len = int(getattr(core, "max_model_len", None) or cfg.model.max_model_len or 0)
        push.send(encode(CoreReady(os.getpid(), max_len)))
        push.send(encode(StepBatch([], core.stats())))  # the pool as it starts, before any request
        CoreLoop(cfg, core, pull, push, parent_pid).run()
    except BaseException as exc:  # the API side turns this into 503s and failed streams
        log.error("engine core failed: %s", exc)
        push.send(encode(CoreFailed(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")))
        raise SystemExit(1)
    finally:
        if core is not None:
            try:
                core.shutdown()
            except Exception:
                log.exception("engine core shutdown failed")
        pull.close(0)
        push.close()
        ctx.term()
