"""What one step's SchedulerOutput costs to reach another rank's process, on the CPU.

Why: with several hosts each step must reach remote ranks. atom pushes the msgpack frame over
ZMQ (IPC on one host, TCP to another: atom/executor/rendezvous.py); the alternative is a
torch.distributed broadcast from rank 0 (a length, then the bytes). This times, for a decode
step of --seqs sequences of --context tokens (block tables included, as the executor sends
them), the encode, and the round trip to a receiver process that decodes it and answers with
one byte (ZMQ IPC, ZMQ TCP loopback, a gloo broadcast of length + bytes and a gloo barrier as
the answer). Loopback TCP leaves out the network: add the frame bytes over the link's
bandwidth and its latency for real hosts.

    PYTHONPATH=. python research/probes/step_transport.py [--seqs 256] [--context 2048]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import tempfile
import time

import msgspec

from atom.executor.worker_ipc import RunStep, ToWorker
from atom.runner.scheduler_output import ScheduledRequest, SchedulerOutput


def decode_step(seqs: int, context: int, block_size: int = 16) -> SchedulerOutput:
    blocks = (context + block_size - 1) // block_size
    reqs = [ScheduledRequest(f"cmpl-{i:032x}-0", context - 1, [-1],
                             list(range(i * blocks, (i + 1) * blocks)), 1) for i in range(seqs)]
    return SchedulerOutput([], reqs, [])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _zmq_peer(to_addr: str, back_addr: str, n: int) -> None:
    import zmq

    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.connect(to_addr)
    push.connect(back_addr)
    dec = msgspec.msgpack.Decoder(ToWorker).decode
    for _ in range(n):
        dec(pull.recv())
        push.send(b"k")
    pull.close(0)
    push.close(1000)
    ctx.term()


def zmq_round_trips(frame: bytes, to_addr: str, back_addr: str, n: int) -> list[float]:
    import zmq

    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    push.bind(to_addr)
    pull.bind(back_addr)
    peer = mp.get_context("spawn").Process(target=_zmq_peer, args=(to_addr, back_addr, n))
    peer.start()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        push.send(frame, copy=False)
        pull.recv()
        times.append(time.perf_counter() - t0)
    peer.join()
    push.close(0)
    pull.close(0)
    ctx.term()
    return times


def _gloo_rank(rank: int, init: str, frame: bytes, n: int, out: "mp.Queue") -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    dec = msgspec.msgpack.Decoder(ToWorker).decode
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        length = torch.tensor([len(frame) if rank == 0 else 0], dtype=torch.int64)
        dist.broadcast(length, 0)
        buf = (torch.frombuffer(bytearray(frame), dtype=torch.uint8) if rank == 0
               else torch.empty(int(length.item()), dtype=torch.uint8))
        dist.broadcast(buf, 0)
        if rank == 1:
            dec(buf.numpy().tobytes())
        dist.barrier()  # the answer
        times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def gloo_round_trips(frame: bytes, n: int) -> list[float]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    init = f"tcp://127.0.0.1:{_free_port()}"
    procs = [ctx.Process(target=_gloo_rank, args=(r, init, frame, n, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    times = out.get()
    for p in procs:
        p.join()
    return times


def _ms(times: list[float]) -> dict:
    warm = times[len(times) // 5:]
    return {"median_ms": round(statistics.median(warm) * 1e3, 3),
            "p90_ms": round(sorted(warm)[int(len(warm) * 0.9)] * 1e3, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=256)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    step = RunStep(decode_step(a.seqs, a.context))
    enc = msgspec.msgpack.Encoder().encode
    t0 = time.perf_counter()
    for _ in range(a.steps):
        frame = enc(step)
    encode_ms = (time.perf_counter() - t0) / a.steps * 1e3
    with tempfile.TemporaryDirectory() as d:
        ipc = zmq_round_trips(frame, f"ipc://{d}/to", f"ipc://{d}/back", a.steps)
    tcp = zmq_round_trips(frame, f"tcp://127.0.0.1:{_free_port()}",
                          f"tcp://127.0.0.1:{_free_port()}", a.steps)
    gloo = gloo_round_trips(frame, a.steps)
    print(json.dumps({"seqs": a.seqs, "context": a.context, "frame_bytes": len(frame),
                      "encode_ms": round(encode_ms, 3), "cpus": os.cpu_count(),
                      "round_trip": {"zmq_ipc": _ms(ipc), "zmq_tcp_loopback": _ms(tcp),
                                     "gloo_broadcast": _ms(gloo)}}, indent=1))


if __name__ == "__main__":
    main()
