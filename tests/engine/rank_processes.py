"""What the multi-rank engine tests share: a small engine over a tiny checkpoint at a tensor-
parallel size, its prompts, and the process table read from /proc, to tell that no rank (or
Ray's own processes) outlived a shutdown."""
from __future__ import annotations

import os
import signal
import time
from typing import Iterator

import pytest
import torch

from atom import SamplingParams
from atom.executor.rank_driver import WorkerDied
from tests.engine.checkpoints import local_engine


def tp_engine(path, tp: int, *extra: str):
    return local_engine(path, "kv_cache.num_blocks=64", "scheduler.max_num_batched_tokens=48",
                        f"parallel.tensor_parallel_size={tp}", *extra)


def tp_prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, 256, (k,), generator=g).tolist() for k in (5, 31, 12, 70)]


def greedy_tokens(engine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """The engine's greedy tokens for `prompts`, then the engine shut down (whatever happens)."""
    try:
        outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens,
                                                       ignore_eos=True))
    finally:
        engine.shutdown()
    return [o["token_ids"] for o in outs]


def killed_rank_fails_fast(engine, pid_of_rank, limit_s: float = 10.0) -> None:
    """A long request is in flight when the rank process `pid_of_rank()` names (read after
    the first step, once every rank is up) is SIGKILLed: the engine's next steps raise
    WorkerDied within `limit_s`, never hang."""
    assert engine.add_request(tp_prompts(), SamplingParams(temperature=0, max_tokens=200,
                                                           ignore_eos=True))
    engine.step()
    os.kill(pid_of_rank(), signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(WorkerDied):
        for _ in range(400):
            engine.step()
    assert time.monotonic() - t0 < limit_s


def procs() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/pid/stat after the command name) of every process."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    yield int(d), f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue


def children(pid: int) -> list[int]:
    return [p for p, stat in procs() if int(stat[1]) == pid]


def descendants(pid: int | None = None) -> set[int]:
    """Every live process under `pid` (this one by default; zombies excluded: their parent
    reaps them)."""
    kids: dict[int, list[int]] = {}
    for p, stat in procs():
        if stat[0] != "Z":
            kids.setdefault(int(stat[1]), []).append(p)
    found, todo = set(), [os.getpid() if pid is None else pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def gone(pids: list[int], timeout_s: float = 15.0) -> bool:
    """Whether every one of `pids` has exited (or is a zombie) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = {p for p, stat in procs() if stat[0] != "Z"}
        if not live.intersection(pids):
            return True
        time.sleep(0.1)
    return False
