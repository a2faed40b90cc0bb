"""The executor of several ranks as local processes: one `python -m atom.executor.worker` per
rank of this host (atom/executor/worker.py), the steps and answers over ZMQ (rank_driver.py).

This host's processes are watched directly (an exit fails the next wait at once); another
host's ranks are started and watched there by its launcher (headless.py). Shutdown leaves no
process behind.
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from atom.config.hosts import resolve_hosts
from atom.config.schema import Config
from atom.executor.rank_driver import BuildRunner, RankDriver, WorkerDied, worker_env
from atom.executor.rendezvous import Endpoints, endpoints, node_ranks, rank_env
from atom.executor.worker import WorkerSpec

_STOP_LINGER_MS = 2000  # at shutdown, how long unsent Stop frames to other hosts may take


def start_ranks(spec: WorkerSpec, ranks: list[int], folder: str) -> list[subprocess.Popen]:
    """One `python -m atom.executor.worker` per rank of this host, sharing one spec file."""
    path = os.path.join(folder, "spec.pkl")
    with open(path, "wb") as f:
        pickle.dump(spec, f)
    env = {**rank_env(os.environ),
           **worker_env(spec.cfg.runtime.device == "cpu" or not _cuda(), len(ranks))}
    return [subprocess.Popen([sys.executable, "-m", "atom.executor.worker", path, str(r)],
                             env=env) for r in ranks]


class MultiprocExecutor(RankDriver):
    def __init__(self, cfg: Config, hf: Any, world_size: int, build_runner: BuildRunner) -> None:
        self._procs: list[subprocess.Popen] = []
        self._hosts = resolve_hosts(cfg.parallel, os.environ)
        self.linger_ms = _STOP_LINGER_MS if self._hosts.multi else 0
        self._dir = tempfile.mkdtemp(prefix="atom-ranks-")
        super().__init__(cfg, hf, world_size, build_runner)

    def _place_ranks(self, cfg: Config) -> Endpoints:
        return endpoints(self.world_size, self._hosts, self._dir)

    def _start_ranks(self, cfg: Config, hf: Any, build_runner: BuildRunner,
                     ends: Endpoints) -> None:
        local = node_ranks(self.world_size, self._hosts, 0)
        spec = WorkerSpec(cfg, hf, build_runner, self.world_size, ends.dist_init, ends.to_worker,
                          ends.from_worker, os.getpid(), local)
        self._procs = start_ranks(spec, local, self._dir)

    def _check_ranks(self) -> None:
        for r, p in enumerate(self._procs):
            if p.poll() is not None:
                raise WorkerDied(f"rank {r} exited (exit code {p.returncode})")

    def _stop_ranks(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for p in self._procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
