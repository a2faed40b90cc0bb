"""The API process's handle on the engine core process: spawn it, feed it, and read it.

Requests and aborts go out on a ZMQ PUSH socket owned by the event loop. A dedicated thread owns the
receiving socket: it decodes each StepBatch, runs the OutputProcessor (detokenize, stop strings) and
hands the whole step to the event loop with one `call_soon_threadsafe`. Stop-string hits are
aborted from that thread on its own PUSH socket (ZMQ sockets are single-threaded). The core's PULL
socket is the one that binds, so both PUSH sockets reach it: a PUSH connected to another PUSH
would queue its aborts forever and, at the high-water mark, block the reader and every stream.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Optional

import msgspec
import zmq

from atom.config.errors import ConfigError
from atom.config.schema import Config
from atom.model_engine.core_ipc import (AbortRequests, AddRequests, ControlCall, ControlReply,
                                        CoreFailed, CoreReady, Heartbeat, StepBatch,
                                        from_core_decoder)
from atom.model_engine.messages import EngineRequest, EngineStats
from atom.model_engine.output_processor import OutputProcessor
from atom.sampling_params import SamplingParams

log = logging.getLogger("atom.engine_client")

_POLL_MS = 200  # how often the reader thread checks that the core process is alive


class EngineError(RuntimeError):
    """A request could not be served because of the engine, not because of its input."""


class EngineCoreDead(EngineError):
    """The engine core process is gone: nothing more will be served until a restart."""


class RequestFailed(EngineError):
    """The engine failed this one request; the core and the rest go on. `rejected`: refused
    before it ran, for its own input (a 400), rather than failed inside a step (a 500)."""

    def __init__(self, message: str, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected


def _config_error(field: str, shown: str, rule: str) -> Exception:
    err = ConfigError(field, None, rule)
    err.line = f"invalid config: {field}={shown}: {rule}"
    return err


class EngineClient:
    """Create with `EngineClient(cfg, tokenizer, core_main=run_core).start()` (or `launch()`, load the tokenizer while
    the core loads the model, `set_tokenizer()`, `wait_ready()`); then `attach(dispatcher)` on the
    event loop."""

    def __init__(self, cfg: Config, tokenizer: Any = None, *,
                 core_main: Callable[[Config, str, str, int], None]) -> None:
        """`core_main`: the core process's entry point (atom.core_process.run_core), handed in by
        the builder so that this package never imports what wires the core."""
        self.cfg = cfg
        self._core_main = core_main
        self.tokenizer = tokenizer
        self.processor = OutputProcessor(tokenizer)
        self.max_model_len = 0
        self.stats = EngineStats()
        self.dead_reason: Optional[str] = None
        self.last_heard = time.monotonic()  # when the core last sent anything (reader thread)
        self._lock = threading.Lock()  # guards `processor` between the loop and the reader thread
        self._ctx = zmq.Context()
        self._dir = tempfile.mkdtemp(prefix="atom-ipc-")
        self._in_addr = f"ipc://{self._dir}/in"
        self._out_addr = f"ipc://{self._dir}/out"
        self._send_sock: Optional[zmq.Socket] = None
        self._proc: Optional[mp.process.BaseProcess] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._encode = msgspec.msgpack.Encoder().encode
        self._calls: dict[int, asyncio.Future] = {}
        self._call_ids = itertools.count(1)
        self._dispatcher: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "EngineClient":
        """Spawn the core and block until it reports ready (it loads the model first)."""
        self.launch()
        return self.wait_ready()

    def set_tokenizer(self, tokenizer: Any) -> None:
        """Before any request: the tokenizer the output processor detokenizes with."""
        self.tokenizer = tokenizer
        self.processor = OutputProcessor(tokenizer)

    def wait_ready(self) -> "EngineClient":
        self._wait_ready(self.cfg.server.engine_ready_timeout_s)
        return self

    def launch(self) -> None:
        """Spawn the core process; returns at once (the model loads over there)."""
        self._recv_sock = self._ctx.socket(zmq.PULL)
        self._recv_sock.bind(self._out_addr)
        self._send_sock = self._socket_to_core()
        self._proc = mp.get_context("spawn").Process(
            target=self._core_main, args=(self.cfg, self._in_addr, self._out_addr, os.getpid()),
            name="atom-engine-core", daemon=True)
        self._proc.start()

    def _socket_to_core(self) -> zmq.Socket:
        """A PUSH socket to the core's PULL (which binds; messages queue until it does). No
        high-water mark: a burst of requests must not block the event loop (or the reader) while
        the core is inside a long step; the core drains everything at its next step."""
        sock = self._ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(self._in_addr)
        return sock

    def _wait_ready(self, timeout_s: float) -> None:
        decode = from_core_decoder().decode
        deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
        while True:
            if self._recv_sock.poll(_POLL_MS):
                msg = decode(self._recv_sock.recv())
                if isinstance(msg, CoreReady):
                    self.last_heard = time.monotonic()
                    self.max_model_len = msg.max_model_len
                    log.info("engine core ready (pid %d, max_model_len %d)", msg.pid, msg.max_model_len)
                    return
                if isinstance(msg, CoreFailed):
                    self.close()
                    if msg.config_error is not None:
                        raise _config_error(*msg.config_error)
                    raise EngineCoreDead(f"engine core failed to start: {msg.message}")
            elif self._proc is not None and not self._proc.is_alive():
                code = self._proc.exitcode
                self.close()
                raise EngineCoreDead(f"engine core exited during startup (exit code {code})")
            if deadline is not None and time.monotonic() > deadline:
                self.close()
                raise EngineCoreDead(f"engine core not ready after {timeout_s} s")

    def attach(self, dispatcher: Any) -> None:
        """Bind to the running event loop and start the reader thread."""
        self._dispatcher = dispatcher
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._read_loop, name="atom-engine-reader", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self.dead_reason is None and self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        """Stop the core (politely, then by force) and release sockets and the IPC directory."""
        self._stop.set()
        if self._proc is not None and self._proc.is_alive() and self._send_sock is not None:
            try:
                self._send_sock.send(self._encode(ControlCall(0, "shutdown")), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self._proc.join(5)
        if self._proc is not None and self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(2)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2 * _POLL_MS / 1000 + 1)
        if not self._ctx.closed:
            self._ctx.destroy(linger=0)  # closes every socket, the reader's included
        self._send_sock = None
        shutil.rmtree(self._dir, ignore_errors=True)

    # -- requests (event-loop side) ----------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    arrival_time: float) -> None:
        """The caller registers the request's collector with the dispatcher first, so no output
        can arrive before someone is there to take it."""
        self._check_alive()
        # Encoded before any state is registered: a request that cannot cross (an integer past
        # 64 bits) must leave nothing behind.
        frame = self._encode(AddRequests([EngineRequest(
            request_id=request_id, prompt_token_ids=prompt_token_ids, sampling_params=params,
            arrival_time=arrival_time)]))
        with self._lock:
            self.processor.add_request(request_id, prompt_token_ids, params, arrival_time)
        try:
            self._send_frame(frame)
        except BaseException:
            with self._lock:
                self.processor.states.pop(request_id, None)
            raise

    def abort(self, request_ids: list[str]) -> None:
        if not request_ids:
            return
        with self._lock:
            for rid in request_ids:
                self.processor.states.pop(rid, None)
        if self.alive:
            self._send(AbortRequests(list(request_ids)))

    async def call(self, op: str, timeout_s: float) -> None:
        """A control operation on the core (profiling); raises on failure or timeout."""
        self._check_alive()
        assert self._loop is not None
        call_id = next(self._call_ids)
        fut = self._loop.create_future()
        self._calls[call_id] = fut
        try:
            self._send(ControlCall(call_id, op))
            await asyncio.wait_for(fut, timeout_s)
        finally:
            self._calls.pop(call_id, None)

    def _send(self, msg: Any) -> None:
        self._send_frame(self._encode(msg))

    def _send_frame(self, frame: bytes) -> None:
        assert self._send_sock is not None
        self._send_sock.send(frame, copy=False)

    def silence_s(self) -> float:
        """Seconds since the core last sent anything: a step, a reply or an idle heartbeat."""
        return max(0.0, time.monotonic() - self.last_heard)

    @property
    def stalled(self) -> bool:
        limit = self.cfg.server.core_silence_timeout_s
        return limit > 0 and self.alive and self.silence_s() > limit

    def _check_alive(self) -> None:
        if not self.alive:
            raise EngineCoreDead(self.dead_reason or "the engine core is not running")

    # -- the reader thread ---------------------------------------------------------------------
    def _read_loop(self) -> None:
        decode = from_core_decoder().decode
        abort_sock = self._socket_to_core()
        try:
            while not self._stop.is_set():
                if not self._recv_sock.poll(_POLL_MS):
                    if self._stop.is_set():
                        return  # close() is stopping the core: its exit is not a failure
                    if self._proc is not None and not self._proc.is_alive():
                        self._die(f"engine core exited (exit code {self._proc.exitcode})")
                        return
                    continue
                msg = decode(self._recv_sock.recv(copy=False).buffer)
                self.last_heard = time.monotonic()
                if isinstance(msg, Heartbeat):
                    continue
                if isinstance(msg, StepBatch):
                    self._on_step(msg, abort_sock)
                elif isinstance(msg, ControlReply):
                    self._loop.call_soon_threadsafe(self._resolve_call, msg)  # type: ignore[union-attr]
                elif isinstance(msg, CoreFailed):
                    self._die(msg.message)
                    return
        except Exception as exc:  # a reader that dies silently would hang every stream
            if self._stop.is_set():
                return
            log.exception("engine reader thread failed")
            self._die(f"engine reader failed: {exc}")
        finally:
            abort_sock.close(0)

    def _on_step(self, batch: StepBatch, abort_sock: zmq.Socket) -> None:
        with self._lock:
            outputs, to_abort = self.processor.process(batch.outputs)
        if to_abort:
            abort_sock.send(self._encode(AbortRequests(to_abort)))
        self.stats = batch.stats
        self._dispatcher.post(outputs, batch.stats)

    def _resolve_call(self, reply: ControlReply) -> None:
        fut = self._calls.get(reply.call_id)
        if fut is None or fut.done():
            return
        if reply.ok:
            fut.set_result(None)
        else:
            fut.set_exception(RuntimeError(reply.error or "engine control call failed"))

    def _die(self, reason: str) -> None:
        log.error("engine core is gone: %s", reason.splitlines()[0] if reason else reason)
        self.dead_reason = reason
        error = EngineCoreDead(reason.splitlines()[0] if reason else "engine core died")
        self._dispatcher.post_failure(error)
        self._loop.call_soon_threadsafe(self._fail_calls, error)  # type: ignore[union-attr]

    def _fail_calls(self, error: BaseException) -> None:
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(error)
