"""Another host's share of the ranks (parallel.node_rank > 0): its workers, no engine, no API.

`python -m atom.run <node 0's overrides> parallel.node_rank=K` (or the same under torchrun, one
launcher per host) ends here: this process starts the host's ranks, which join node 0's
torch.distributed group and pull their steps from node 0's executor over TCP
(atom/executor/rendezvous.py), and then watches both sides. Node 0 cannot see this host's
processes, so this launcher says it is alive every second and reports a rank that exits; when
node 0 goes away (its socket disconnects, or ZMQ's heartbeat finds it silent) the ranks here are
stopped, so a lost engine leaves no process behind on any host.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from atom.config.hosts import resolve_hosts
from atom.config.schema import Config
from atom.executor.multiproc import start_ranks
from atom.executor.rendezvous import endpoints, node_ranks
from atom.executor.worker import WorkerSpec
from atom.executor.worker_ipc import HostAlive, WorkerFailed

log = logging.getLogger("atom.headless")

_BEAT_S = 1.0  # how often node 0 hears from this host (it gives up after HOST_SILENCE_S)
_ZMQ_HEARTBEAT_MS = 1000  # ZMTP pings to node 0: a host that vanishes without a FIN is found
_ZMQ_HEARTBEAT_TIMEOUT_MS = 10_000


def run_node(cfg: Config, hf: Any, world_size: int,
             build_runner: Callable[[Config, Any, Any], Any]) -> int:
    """Run this host's ranks until node 0 stops them or goes (0), or one of them fails (1);
    `hf` and `build_runner` as MultiprocExecutor takes them."""
    hosts = resolve_hosts(cfg.parallel, os.environ)
    folder = tempfile.mkdtemp(prefix="atom-node-")
    ends = endpoints(world_size, hosts, folder)
    ranks = node_ranks(world_size, hosts, hosts.node_rank)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    push.setsockopt(zmq.HEARTBEAT_IVL, _ZMQ_HEARTBEAT_MS)
    push.setsockopt(zmq.HEARTBEAT_TIMEOUT, _ZMQ_HEARTBEAT_TIMEOUT_MS)
    monitor = push.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    push.connect(ends.from_worker)
    procs: list[subprocess.Popen] = []
    previous = signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        log.info("host %d of %d: ranks %s, node 0 at %s", hosts.node_rank, hosts.nnodes, ranks,
                 ends.dist_init)
        procs = start_ranks(WorkerSpec(cfg, hf, build_runner, world_size, ends.dist_init,
                                       ends.to_worker, ends.from_worker, os.getpid(), ranks),
                            ranks, folder)
        return _watch(hosts.node_rank, ranks, procs, push, monitor)
    except (SystemExit, KeyboardInterrupt):
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop(procs)
        push.disable_monitor()
        monitor.close(0)
        push.close()
        ctx.term()
        shutil.rmtree(folder, ignore_errors=True)


def _watch(node_rank: int, ranks: list[int], procs: list[subprocess.Popen], push: zmq.Socket,
           monitor: zmq.Socket) -> int:
    """Once a beat: say this host is alive, report a rank that failed, and end when the ranks
    have (node 0 stopped them) or node 0's connection drops."""
    encode = msgspec.msgpack.Encoder().encode
    connected = False
    while True:
        _send(push, encode(HostAlive(node_rank)))
        for rank, p in zip(ranks, procs):
            code = p.poll()
            if code not in (None, 0):
                _send(push, encode(WorkerFailed(rank, f"rank {rank} on host {node_rank} "
                                                      f"exited ({_how(code)})")))
                log.error("rank %d exited (%s): stopping this host", rank, _how(code))
                return 1
        if all(p.poll() == 0 for p in procs):
            return 0  # node 0 stopped them
        deadline = time.monotonic() + _BEAT_S
        while (left := deadline - time.monotonic()) > 0 and monitor.poll(int(left * 1000)):
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_CONNECTED:
                connected = True
            elif event == zmq.EVENT_DISCONNECTED and connected:
                # Node 0 ended (its job done, or failed: it reports that itself). This host
                # failed only if one of its ranks did; the others are stopped if node 0's Stop
                # missed them.
                if not _exited_on_stop(procs):
                    log.info("node 0 is gone: stopping this host's ranks")
                return 1 if any(p.poll() not in (None, 0) for p in procs) else 0


def _exited_on_stop(procs: list[subprocess.Popen], grace_s: float = 5.0) -> bool:
    """Whether the ranks end by themselves (node 0 sent them Stop before it went)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if all(p.poll() is not None for p in procs):
            return True
        time.sleep(0.1)
    return False


def _send(push: zmq.Socket, frame: Any) -> None:
    """Never blocks: node 0 may not be listening yet, or not reading while it is idle."""
    try:
        push.send(frame, zmq.NOBLOCK)
    except zmq.Again:
        pass


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def _how(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def _exit_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(0)
