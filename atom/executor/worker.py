"""One rank of a multi-process executor: its own process, device and model shard.

Started by MultiprocExecutor (or, on another host, by atom/executor/headless.py) as
`python -m atom.executor.worker SPEC_FILE RANK`, or in a Ray actor by RayExecutor. The rank
joins the torch.distributed group (NCCL on GPUs, gloo on CPUs), builds its ModelRunner with the
function the builder handed over (the layers shard themselves by the rank it reads), agrees with
the others on the KV block count (the minimum), then runs every step the engine core
broadcasts, its block tables made whole again from the ones the rank keeps
(block_table_deltas.py). Rank 0 alone answers with the tokens each request keeps; every rank
samples the same tokens from the same gathered logits, so each one's pending tokens (async
scheduling) match.

A step stays in flight until the next one arrives or the engine asks for it (Flush), so the
device runs step N while the host prepares step N+1, as in one process.

torch is imported inside the functions a rank runs: the engine core's process imports this
module for WorkerSpec and, with every rank in a worker, never needs torch itself.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

import msgspec
import zmq

from atom.executor.block_table_deltas import TableKeeper
from atom.executor.worker_ipc import (Flush, Launched, Profile, Profiled, RunStep, StepResult,
                                      Stop, ToWorker, WorkerFailed, WorkerReady)
from atom.log_setup import configure_logging
from atom.runner.profiler import step_label

log = logging.getLogger("atom.worker")

_POLL_MS = 500  # how often a waiting rank checks that the engine that started it is alive


@dataclass
class WorkerSpec:
    """Everything a rank needs, written once by the executor for all ranks."""

    cfg: Any  # the run's Config
    hf: Any  # the model's config, loaded once by the executor's process
    build_runner: Callable[[Any, Any, Any], Any]  # (cfg, hf, ParallelState) → the rank's runner
    world_size: int
    dist_init: str  # torch.distributed init_method, e.g. tcp://127.0.0.1:PORT
    to_worker: list[str]  # ZMQ address each rank pulls its steps from
    from_worker: str  # ZMQ address every rank pushes to (ready, failures; rank 0's results)
    # the engine's process, or another host's launcher: gone, the rank stops; None: the rank's
    # launcher ends it with the engine (Ray ends an actor with the driver that owns it)
    parent_pid: Optional[int]
    # the ranks this host runs, on consecutive GPUs from runtime.device's index (a replica's first)
    local_ranks: list[int]


def _join_group(spec: WorkerSpec, rank: int) -> tuple[WorkerSpec, str]:
    """Join the ranks' torch.distributed group; on a GPU the rank takes its own device, which
    the spec it returns names for the runner."""
    import torch
    import torch.distributed as dist

    cuda = spec.cfg.runtime.device != "cpu" and torch.cuda.is_available()
    if cuda:
        index = _first_device(spec.cfg.runtime.device) + spec.local_ranks.index(rank)
        torch.cuda.set_device(index)
        runtime = dataclasses.replace(spec.cfg.runtime, device=f"cuda:{index}")
        spec = dataclasses.replace(spec, cfg=dataclasses.replace(spec.cfg, runtime=runtime))
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, init_method=spec.dist_init, rank=rank,
                            world_size=spec.world_size)
    return spec, backend


def _first_device(device: str) -> int:
    """`cuda:K` → K (a data-parallel replica's first GPU); `cuda` or `auto` → 0."""
    _, _, index = device.partition(":")
    return int(index) if index else 0


def _min_blocks(num_blocks: int, backend: str) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([num_blocks], device="cuda" if backend == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def serve(spec: WorkerSpec, rank: int) -> None:
    from atom.layers.parallel_state import ParallelState  # torch (the module docstring says why)

    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(spec.to_worker[rank])
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.connect(spec.from_worker)
    encode = msgspec.msgpack.Encoder().encode
    decode = msgspec.msgpack.Decoder(ToWorker).decode
    try:
        spec, backend = _join_group(spec, rank)
        parallel = ParallelState.of_process(spec.cfg.parallel.enable_expert_parallel)
        runner = spec.build_runner(spec.cfg, spec.hf, parallel)
        blocks = _min_blocks(runner.num_blocks, backend)
        push.send(encode(WorkerReady(rank, blocks, runner.max_model_len, runner.vocab_size,
                                     runner.device.type)))
        in_flight, number = None, 0
        tables = TableKeeper()

        def answer(step: Any) -> None:
            if rank == 0:
                sampled, logprobs = step.result()
                push.send(encode(StepResult(sampled, logprobs, step.proposals)))

        def profile(profiler: Any, start: bool) -> None:
            if start:
                profiler.start()
            else:
                profiler.stop()
                push.send(encode(Profiled(rank)))

        def raised(number: int, exc: Exception, in_flight: Any) -> None:
            """Step `number` raised before it ran, on this rank (and, the same preparation of
            the same step, on every rank): said, so the engine isolates its request; the step
            before is answered."""
            log.warning("rank %d: step %d raised %s: %s", rank, number, type(exc).__name__, exc)
            push.send(encode(Launched(rank, number, f"{type(exc).__name__}: {exc}")))
            if in_flight is not None:
                answer(in_flight)

        while True:
            if not pull.poll(_POLL_MS):
                if spec.parent_pid is not None and os.getppid() != spec.parent_pid:
                    return  # the engine is gone: nobody will ask for another step
                continue
            try:
                msg = decode(pull.recv())
            except msgspec.ValidationError as exc:
                # Flush and Stop carry nothing to refuse: a frame that does not decode is a
                # step (its SamplingParams validate on decode), failed like a launch that raised.
                number += 1
                raised(number, exc, in_flight)
                in_flight = None
                continue
            if isinstance(msg, Stop):
                return
            if isinstance(msg, Flush):
                if in_flight is not None:
                    answer(in_flight)
                    in_flight = None
                continue
            if isinstance(msg, Profile):
                profile(runner.profiler, msg.start)
                continue
            assert isinstance(msg, RunStep)
            number += 1
            try:
                step = launch(runner, tables.restore(msg.out, msg.table_starts))
            except Exception as exc:
                raised(number, exc, in_flight)
                in_flight = None
                continue
            if rank == 0:
                push.send(encode(Launched(rank, number)))
            if in_flight is not None:
                answer(in_flight)
            in_flight = step
    except BaseException as exc:  # reported, so the engine fails at once instead of waiting
        log.error("rank %d failed: %s", rank, exc)
        push.send(encode(WorkerFailed(rank, f"{type(exc).__name__}: {exc}\n"
                                            f"{traceback.format_exc(limit=6)}")))
        raise SystemExit(1)
    finally:
        _leave_group()
        pull.close(0)
        push.close()
        ctx.term()


def launch(runner: Any, out: Any) -> Any:
    """The rank's launch of a step, named in the trace while its profiler runs."""
    if not runner.profiler.active:
        return runner.launch(out)
    import torch

    with torch.profiler.record_function(step_label(out)):
        return runner.launch(out)


def _leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def main() -> None:
    configure_logging()
    with open(sys.argv[1], "rb") as f:
        spec: WorkerSpec = pickle.load(f)
    serve(spec, int(sys.argv[2]))


if __name__ == "__main__":
    main()
