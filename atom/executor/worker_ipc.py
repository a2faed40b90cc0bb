"""What crosses between a multi-process executor and its worker processes (one per rank).

One tagged union per direction, msgspec-encoded once per step: the engine core's SchedulerOutput
goes to every rank, and rank 0 alone answers with the tokens each request keeps. msgpack, never
pickle: with several hosts these frames cross a network.
"""
from __future__ import annotations

from typing import Optional, Union

import msgspec

from atom.model_engine.messages import TokenLogprob
from atom.runner.scheduler_output import SchedulerOutput


class RunStep(msgspec.Struct, tag="step"):
    """`out`'s block tables hold only what the ranks lack, from `table_starts` on (one per
    request; 0: whole): atom/executor/block_table_deltas.py."""

    out: SchedulerOutput
    table_starts: list[int]


class Flush(msgspec.Struct, tag="flush"):
    """Resolve the step in flight now: the engine waits for it before it sends another."""


class Stop(msgspec.Struct, tag="stop"):
    pass


class Profile(msgspec.Struct, tag="profile"):
    """Start or stop every rank's torch profiler (traces under {dir}/rank_{r}); a stop is
    answered (Profiled) once the rank's trace is written."""

    start: bool


class Profiled(msgspec.Struct, tag="profiled"):
    rank: int


class WorkerReady(msgspec.Struct, tag="ready"):
    rank: int
    num_blocks: int  # the minimum over every rank: what the scheduler may hand out
    max_model_len: int
    vocab_size: int
    device_type: str


class StepResult(msgspec.Struct, tag="result"):
    sampled: dict[int, list[int]]
    logprobs: dict[int, list[TokenLogprob]]
    # batch index → the drafts rank 0's runner-side drafter made (specdecode=mtp)
    proposals: dict[int, list[int]] = msgspec.field(default_factory=dict)


class Launched(msgspec.Struct, tag="launched"):
    """Whether step `number` (the ranks count the steps they are sent) launched: rank 0 says it
    of every step, before answering the one before; another rank only when its launch raised.
    A launch that raised changed nothing on the rank, so the engine can isolate the request
    behind it (engine_core._isolate) if every rank raised it; if only some did, the others are
    inside a collective without them and the engine fails."""

    rank: int
    number: int
    error: Optional[str] = None


class WorkerFailed(msgspec.Struct, tag="failed"):
    rank: int
    message: str


class HostAlive(msgspec.Struct, tag="alive"):
    """Sent every second by another host's launcher (atom/executor/headless.py): node 0 cannot
    watch that host's processes, so a host that falls silent fails the engine instead."""

    node_rank: int


ToWorker = Union[RunStep, Flush, Stop, Profile]
FromWorker = Union[WorkerReady, Launched, StepResult, Profiled, WorkerFailed, HostAlive]


# Every rank's process runs with NVLink multicast off: a program that uses it can take a shared
# host's GPUs out of service for a day or more.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}
