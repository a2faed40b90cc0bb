"""What one step's SchedulerOutput costs to reach another rank's process, on the CPU.

Why: every step reaches every rank (several hosts included), and at tp=1 through the
multi-process executor the whole transport is host time a single process does not spend. atom
pushes the msgpack frame over ZMQ (IPC on one host, TCP to another:
atom/executor/rendezvous.py); the alternative is a torch.distributed broadcast from rank 0.
Each request's block table goes once, then only the blocks it gained
(atom/executor/block_table_deltas.py). This times, over --steps consecutive decode steps of
--seqs sequences at --context tokens (every 16th table gaining a block a step, as in steady
decoding), with every table whole (a first step, or the fallback after a step that raised) and
as deltas: the frame, the driver's encode (with the cut), the rank's decode (with the tables
rebuilt), the answer's encode and decode (one token per row), and the round trip to a receiver
process that decodes, rebuilds and answers (ZMQ IPC; for whole tables also ZMQ TCP loopback and
a gloo broadcast of length + bytes with a barrier as the answer). Loopback TCP leaves out the
network: add the frame bytes over the link's bandwidth and its latency for real hosts.

    PYTHONPATH=. python research/probes/step_transport.py [--seqs 256] [--context 1024] [--out F]
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
from typing import Callable

import msgspec

from atom.executor.block_table_deltas import WHOLE, TableKeeper, TableSender
from atom.executor.worker_ipc import FromWorker, RunStep, StepResult, ToWorker
from atom.runner.scheduler_output import ScheduledRequest, SchedulerOutput

BLOCK = 16


def decode_steps(seqs: int, context: int, steps: int) -> list[SchedulerOutput]:
    """Consecutive decode steps ending at `context` tokens: request i's table gains a block at
    the steps where its length crosses a block boundary (contexts staggered by i)."""
    outs, tables = [], {}
    most = -(-(context + BLOCK) // BLOCK)  # a table's blocks at the last step
    for k in range(steps):
        reqs = []
        for i in range(seqs):
            rid, pos = f"cmpl-{i:032x}-0", context - steps + k + i % BLOCK
            table = tables.setdefault(rid, [])
            while len(table) * BLOCK < pos + 1:
                table.append(i * most + len(table))
            reqs.append(ScheduledRequest(rid, pos, [-1], list(table), 1))
        outs.append(SchedulerOutput([], reqs, []))
    return outs


def frames(outs: list[SchedulerOutput], delta: bool) -> list[bytes]:
    enc = msgspec.msgpack.Encoder().encode
    if not delta:
        return [enc(RunStep(o, [WHOLE] * len(o.requests))) for o in outs]
    sender = TableSender()
    return [enc(RunStep(*sender.cut(o))) for o in outs]


def answer(seqs: int) -> bytes:
    return msgspec.msgpack.Encoder().encode(StepResult({i: [1234] for i in range(seqs)}, {}))


def _median_ms(work: Callable[[int], None], steps: int) -> float:
    """The median over the steps of `work(k)` for step k (the machine is shared: a mean would
    carry other processes' bursts)."""
    times = []
    for k in range(steps):
        t0 = time.perf_counter()
        work(k)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _zmq_peer(to_addr: str, back_addr: str, n: int, reply: bytes) -> None:
    import zmq

    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.connect(to_addr)
    push.connect(back_addr)
    dec = msgspec.msgpack.Decoder(ToWorker).decode
    keeper = TableKeeper()
    for _ in range(n):
        msg = dec(pull.recv())
        keeper.restore(msg.out, msg.table_starts)
        push.send(reply)
    pull.close(0)
    push.close(1000)
    ctx.term()


def zmq_round_trips(all_frames: list[bytes], reply: bytes, to_addr: str,
                    back_addr: str) -> list[float]:
    """Each frame out, the peer's decode + rebuild, its answer back and decoded here."""
    import zmq

    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    push.bind(to_addr)
    pull.bind(back_addr)
    peer = mp.get_context("spawn").Process(target=_zmq_peer,
                                           args=(to_addr, back_addr, len(all_frames), reply))
    peer.start()
    dec = msgspec.msgpack.Decoder(FromWorker).decode
    times = []
    for f in all_frames:
        t0 = time.perf_counter()
        push.send(f, copy=False)
        dec(pull.recv())
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


def tables_as(outs: list[SchedulerOutput], delta: bool, reply: bytes, folder: str) -> dict:
    """One way of sending the tables, measured end to end."""
    enc = msgspec.msgpack.Encoder().encode
    dec = msgspec.msgpack.Decoder(ToWorker).decode
    sent = frames(outs, delta)
    sender, keeper = TableSender(), TableKeeper()
    cut = (lambda o: RunStep(*sender.cut(o))) if delta else (
        lambda o: RunStep(o, [WHOLE] * len(o.requests)))

    def rank_side(k: int) -> None:
        msg = dec(sent[k])
        keeper.restore(msg.out, msg.table_starts)

    steady = sent[len(sent) // 2:]
    return {
        "frame_bytes_median": int(statistics.median(len(f) for f in steady)),
        "driver_encode_ms": _median_ms(lambda k: enc(cut(outs[k])), len(outs)),
        "rank_decode_ms": _median_ms(rank_side, len(sent)),
        "round_trip_zmq_ipc": _ms(zmq_round_trips(sent, reply, f"ipc://{folder}/to{delta}",
                                                  f"ipc://{folder}/back{delta}")),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=256)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    outs = decode_steps(a.seqs, a.context, a.steps)
    reply = answer(a.seqs)
    dec_reply = msgspec.msgpack.Decoder(FromWorker).decode
    res = StepResult({i: [1234] for i in range(a.seqs)}, {})
    enc = msgspec.msgpack.Encoder().encode
    with tempfile.TemporaryDirectory() as d:
        whole, delta = tables_as(outs, False, reply, d), tables_as(outs, True, reply, d)
    whole_frame = frames(outs[-1:], False)[0]
    whole["round_trip_zmq_tcp_loopback"] = _ms(zmq_round_trips(
        [whole_frame] * a.steps, reply, f"tcp://127.0.0.1:{_free_port()}",
        f"tcp://127.0.0.1:{_free_port()}"))
    whole["round_trip_gloo_broadcast"] = _ms(gloo_round_trips(whole_frame, a.steps))
    report = {"seqs": a.seqs, "context": a.context, "steps": a.steps, "cpus": os.cpu_count(),
              "answer": {"bytes": len(reply),
                         "encode_ms": _median_ms(lambda k: enc(res), a.steps),
                         "decode_ms": _median_ms(lambda k: dec_reply(reply), a.steps)},
              "whole_tables": whole, "table_deltas": delta}
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
