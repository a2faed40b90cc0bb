"""The engine's side of ranks that run elsewhere: steps out to every rank over ZMQ, rank 0's
answers back, the ranks watched while it waits.

Each step's SchedulerOutput is encoded once and pushed to every rank (IPC on this host, TCP to
other hosts: atom/executor/rendezvous.py), each block table as only the blocks the ranks lack
(block_table_deltas.py); rank 0 answers with the tokens each request keeps, in step order. A
step's result is waited for only when the engine asks for it, so with async scheduling the
ranks run step N while the engine builds step N+1. A rank that fails or exits, or
another host that falls silent, makes the next wait raise at once (never a hang).

The ranks are the same worker loop (atom/executor/worker.py) whoever starts them: what differs
between the executors is only how their processes start, are watched and are stopped — local
processes (multiproc.py) or Ray actors (ray_executor.py) — the three methods a subclass gives.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Optional

import msgspec
import zmq

from atom.config.schema import Config
from atom.executor.block_table_deltas import TableSender
from atom.executor.rendezvous import Endpoints
from atom.executor.step_ledger import RanksOutOfStep, StepLedger
from atom.executor.worker_ipc import (NO_MULTICAST_ENV, FromWorker, Flush, HostAlive, Launched,
                                      Profile, Profiled, RunStep, StepResult, Stop, WorkerFailed,
                                      WorkerReady)
from atom.runner.profiler import NO_DIR
from atom.runner.scheduler_output import SchedulerOutput

log = logging.getLogger("atom.executor")

_POLL_MS = 200  # how often a wait checks that every rank is still alive
# Another host's launcher says it is alive every second; this much silence fails the engine.
HOST_SILENCE_S = 10.0
# After rank 0 says a step raised, how long the other ranks have to say it too: they raise at
# the same point of the same host-side preparation, so this bounds a hang, not a wait.
AGREE_S = 10.0
# At shutdown, how long the ranks have to leave their loop on Stop before they are ended by
# force; once a rank has died the others may sit in a collective with it and never read Stop.
STOP_GRACE_S = 10.0
DEAD_GRACE_S = 1.0

BuildRunner = Callable[[Config, Any, Any], Any]


class WorkerDied(RuntimeError):
    """A rank failed or exited: the engine cannot run another step."""


class StepRaised(RuntimeError):
    """A step raised on every rank before it ran: the ranks are as they were, and the engine
    isolates the request behind it as it does in one process."""


class RemoteStep:
    """A step sent to the ranks; `result()` waits for rank 0's answer to it."""

    def __init__(self, executor: "RankDriver", number: int, rows: list[int]) -> None:
        self._executor, self._number, self.rows = executor, number, rows
        self.proposals: dict[int, list[int]] = {}  # rank 0's drafter's, set by result()

    def launch_failure(self) -> Optional[Exception]:
        """Whether the ranks raised launching this step (rank 0 says so before it answers the
        step before, so asking after that answer costs no wait)."""
        return self._executor.launch_failure(self._number)

    def result(self) -> tuple[dict[int, list[int]], dict]:
        if not self.rows:
            return {}, {}
        r = self._executor.wait(self._number)
        self.proposals = r.proposals
        return r.sampled, r.logprobs


class RankDriver:
    """An executor of `world_size` ranks in other processes; subclasses start them."""

    linger_ms = 0  # how long shutdown leaves unsent Stop frames to reach other hosts' ranks

    def __init__(self, cfg: Config, hf: Any, world_size: int, build_runner: BuildRunner) -> None:
        """hf: the model's config, loaded once here for every rank; build_runner: what each
        rank builds its runner with (atom.runner_builder.build_runner), run in the worker."""
        self.world_size = world_size
        self._profiler_dir = cfg.profiler.torch_profiler_dir
        self._profiling = False
        self._ctx = zmq.Context()
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = msgspec.msgpack.Decoder(FromWorker).decode
        self._sent = 0  # steps sent
        self._flushed = 0  # the last step a Flush was sent for
        self.ledger = StepLedger()
        self._tables = TableSender()  # what every rank holds of each request's block table
        self._dead = False  # a WorkerDied was raised: shutdown does not wait on the ranks
        self._push: list[zmq.Socket] = []
        self._heard: dict[int, float] = {}  # another host → when its launcher last spoke
        try:
            ends = self._place_ranks(cfg)
            self._pull, self._push = self._bind(ends)
            self._start_ranks(cfg, hf, build_runner, ends)
            ready = self._await_ready()
        except BaseException:
            self.shutdown()
            raise
        self.num_blocks = min(r.num_blocks for r in ready)
        first = next(r for r in ready if r.rank == 0)
        self.max_model_len, self.vocab_size = first.max_model_len, first.vocab_size
        self.device_type = first.device_type
        log.info("%d ranks ready (%s, %s); KV blocks per rank: %d", world_size,
                 type(self).__name__, first.device_type, self.num_blocks)

    # -- what a subclass gives: where the ranks run, how they start, live and stop -----------
    def _place_ranks(self, cfg: Config) -> Endpoints:
        """Decide where the ranks run; the endpoints this driver binds and they connect to."""
        raise NotImplementedError

    def _start_ranks(self, cfg: Config, hf: Any, build_runner: BuildRunner,
                     ends: Endpoints) -> None:
        """Start every rank this driver owns (each then runs atom.executor.worker.serve)."""
        raise NotImplementedError

    def _check_ranks(self) -> None:
        """Raise WorkerDied if a rank this driver started has exited."""
        raise NotImplementedError

    def _stop_ranks(self, grace_s: float) -> None:
        """After the Stop frames: wait up to grace_s for the ranks to end, end those that do
        not, release what placed them."""
        raise NotImplementedError

    # -- start-up ----------------------------------------------------------------------------
    def _bind(self, ends: Endpoints) -> tuple[zmq.Socket, list[zmq.Socket]]:
        pull = self._ctx.socket(zmq.PULL)
        for addr in ends.bind_from_worker:
            pull.bind(addr)
        push = []
        for addr in ends.bind_to_worker:
            sock = self._ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(addr)
            push.append(sock)
        return pull, push

    def _await_ready(self) -> list[WorkerReady]:
        """Every rank's WorkerReady (a rank that fails or exits while it builds fails the wait);
        ranks of other hosts must have built the same model."""
        ready: list[WorkerReady] = []
        while len(ready) < self.world_size:
            msg = self._recv()
            if isinstance(msg, WorkerReady):
                ready.append(msg)
        first = next(r for r in ready if r.rank == 0)
        for r in ready:
            if (r.vocab_size, r.max_model_len) != (first.vocab_size, first.max_model_len):
                raise WorkerDied(f"rank {r.rank} built another model (vocab {r.vocab_size}, "
                                 f"max_model_len {r.max_model_len}; rank 0: {first.vocab_size}, "
                                 f"{first.max_model_len}): every host needs the same config")
        return ready

    # -- steps ------------------------------------------------------------------------------
    def execute(self, out: SchedulerOutput) -> RemoteStep:
        try:
            frame = self._encode(RunStep(*self._tables.cut(out)))
        except Exception:
            self._tables.forget()  # no rank heard of this step: the record is ahead of them
            raise
        for sock in self._push:
            sock.send(frame, copy=False)
        self._sent += 1
        rows = [i for i, r in enumerate(out.requests) if r.num_sampled]
        if not rows:
            self.ledger.sent_rowless(self._sent)
        return RemoteStep(self, self._sent, rows)

    def wait(self, number: int) -> StepResult:
        """Rank 0's answer to step `number` (answers come in step order). The ranks hold the
        newest step until another arrives, so waiting for it asks them to finish it now."""
        if number == self._sent and self._flushed < number and number > self.ledger.answered:
            self._send(Flush())
            self._flushed = number
        while (result := self.ledger.result(number)) is None:
            self._take(self._recv())
        return result

    def launch_failure(self, number: int) -> Optional[Exception]:
        """StepRaised if every rank raised launching step `number`, None if it launched; if
        only some ranks raised, the others wait in a collective without them: WorkerDied."""
        while not (status := self.ledger.launched(number))[0]:
            self._take(self._recv())
        error = status[1]
        if error is None:
            return None
        self._tables.forget()  # a rank may have raised before or after taking the step's tables
        deadline = time.monotonic() + AGREE_S
        while not self.ledger.raised_everywhere(number, self.world_size):
            self._take(self._recv(deadline, f"step {number} raised on rank 0 ({error}) but not "
                                            f"on every rank within {AGREE_S:.0f} s"))
        return StepRaised(error)

    def _take(self, msg: Any) -> None:
        if not isinstance(msg, (Launched, StepResult)):
            return
        try:
            self.ledger.take(msg)
        except RanksOutOfStep as e:
            self._dead = True
            raise WorkerDied(str(e)) from None

    def _recv(self, deadline: Optional[float] = None, late: str = "") -> Any:
        """The next message of a rank (another host's liveness beats are taken in here); past
        `deadline`, WorkerDied saying `late`."""
        try:
            return self._next_message(deadline, late)
        except WorkerDied:
            self._dead = True
            raise

    def _next_message(self, deadline: Optional[float], late: str) -> Any:
        while True:
            while not self._pull.poll(_POLL_MS):
                self._check_alive()
                if deadline is not None and time.monotonic() > deadline:
                    raise WorkerDied(late)
            msg = self._decode(self._pull.recv())
            if isinstance(msg, WorkerFailed):
                raise WorkerDied(f"rank {msg.rank} failed: {msg.message}")
            if not isinstance(msg, HostAlive):
                return msg
            self._heard[msg.node_rank] = time.monotonic()

    def _check_alive(self) -> None:
        self._check_ranks()
        now = time.monotonic()
        for node, t in self._heard.items():
            if now - t > HOST_SILENCE_S:
                raise WorkerDied(f"host {node} has been silent for {now - t:.0f} s")

    def device_usable(self) -> bool:
        """A step that raised here raised before reaching any rank (they report their own
        failures as WorkerDied)."""
        return True

    def start_profile(self) -> None:
        """Every rank's profiler, each writing under its own folder (runner/profiler.rank_dir;
        checked here, so a missing dir is refused before any rank hears of it)."""
        if self._profiler_dir is None:
            raise RuntimeError(NO_DIR)
        self._send(Profile(True))
        self._profiling = True

    def stop_profile(self) -> None:
        """Returns once every rank has written its trace."""
        if not self._profiling:
            return
        self._send(Profile(False))
        self._profiling = False
        stopped: set[int] = set()
        while len(stopped) < self.world_size:
            msg = self._recv()
            if isinstance(msg, Profiled):
                stopped.add(msg.rank)
            else:
                self._take(msg)

    def _send(self, msg: Any) -> None:
        frame = self._encode(msg)
        for sock in self._push:
            sock.send(frame)

    def shutdown(self) -> None:
        """Stop every rank (politely, then by force) and release the sockets."""
        if not self._ctx.closed:
            frame = self._encode(Stop())
            for sock in self._push:
                try:
                    sock.send(frame, zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
        self._stop_ranks(DEAD_GRACE_S if self._dead else STOP_GRACE_S)
        if not self._ctx.closed:
            # Other hosts' Stop frames may still be on the wire: dropped, their ranks would wait
            # for their launcher to see node 0 gone and stop them by force.
            self._ctx.destroy(linger=self.linger_ms)


def worker_env(cpu: bool, local_ranks: int) -> dict[str, str]:
    """What every rank's process runs with beyond its launcher's environment: NVLink multicast
    off and, on CPUs, its share of the host's cores (not all of them each)."""
    env = dict(NO_MULTICAST_ENV)
    if cpu:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // local_ranks))
    return env
