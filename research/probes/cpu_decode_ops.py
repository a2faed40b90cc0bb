"""CPU decode of the embedded default (SmolLM2-135M Q4_1 GGUF, the `cpu` kernel backend): the
torch ops one decode step dispatches (forward and sampling), and CPU time per decode step split
into the int4 kernels, the rest of the forward and sampling, and the engine outside them
(scheduler, prepare, output processing).

CPU time (`time.process_time`) at one thread is the measure: on a shared 2-core machine wall
time at 2 threads swings with the neighbours' load, CPU time of one thread barely does.

    python research/probes/cpu_decode_ops.py [--threads 1] [--tokens 128] [--streams 1 8]
        [--skip-int4] [--top N]

Before/after: run it on each tree (the old one through PYTHONPATH at a `git archive` of it).
"""
from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import atom
from atom import SamplingParams


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def build(threads: int, extra: list[str]) -> Any:
    return atom.build_engine(atom.compose([
        "load.progress_bar=false", "runtime.device=cpu", f"runtime.cpu_threads={threads}",
        "runtime.enable_log_stats=false", *extra]))


def count_decode_ops(engine: Any) -> Counter:
    """Ops of the runner's forward + sampling on one decode step (1 stream), the third."""
    runner = engine.core.executor.runner
    launch = runner._launch
    seen: list[Counter] = []

    def counted(out, inputs):
        if not inputs.meta.is_decode:
            return launch(out, inputs)
        counter = OpCounter()  # the last decode step's: the first builds what later ones reuse
        with counter:
            step = launch(out, inputs)
        seen.append(counter.ops)
        return step

    runner._launch = counted
    engine.generate(["The capital of France is"],
                    SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    runner._launch = launch
    return seen[-1]


def time_decode(engine: Any, streams: int, tokens: int, skip_int4: bool = False
                ) -> tuple[float, ...]:
    """CPU ms per decode step: all, in the runner's forward + sampling, in the int4 kernels;
    and wall ms per step. The int4 kernels read the weights from memory, so a neighbour's
    traffic moves their time; the rest is the op count's. With skip_int4 each int4 call
    returns its first result again (tokens are then meaningless): what the other ops cost when
    the weights' traffic does not evict them from the caches."""
    runner = engine.core.executor.runner
    launch = runner._launch
    inside = [0.0, 0.0, 0.0]
    int4 = torch._weight_int4pack_mm_for_cpu

    first: dict[tuple, torch.Tensor] = {}

    def timed_int4(*args):
        t0, w0 = time.process_time(), time.perf_counter()
        if skip_int4:
            key = (args[0].shape[0], args[1].data_ptr())
            out = first.get(key)
            if out is None:
                out = first[key] = int4(*args)
        else:
            out = int4(*args)
        inside[1] += time.process_time() - t0
        inside[2] += time.perf_counter() - w0
        return out

    def timed(out, inputs):
        t0 = time.process_time()
        step = launch(out, inputs)
        inside[0] += time.process_time() - t0
        return step

    prompts = [f"Prompt number {i}: the weather today is" for i in range(streams)]
    sp = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    engine.add_request(prompts, sp)
    engine.step()  # the prefill, not timed
    runner._launch = timed
    torch._weight_int4pack_mm_for_cpu = timed_int4
    steps = 0
    c0, w0 = time.process_time(), time.perf_counter()
    while not engine.is_finished():
        engine.step()
        steps += 1
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    runner._launch = launch
    torch._weight_int4pack_mm_for_cpu = int4
    return (1e3 * cpu / steps, 1e3 * inside[0] / steps, 1e3 * inside[1] / steps,
            1e3 * wall / steps, 1e3 * inside[2] / steps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--streams", type=int, nargs="*", default=[1])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--top", type=int, default=0, help="print the N most frequent ops")
    ap.add_argument("--skip-int4", action="store_true",
                    help="int4 kernels replay their first result (time_decode says why)")
    ap.add_argument("overrides", nargs="*", default=[])
    args = ap.parse_args()
    engine = build(args.threads, args.overrides)
    ops = count_decode_ops(engine)
    print(f"torch ops per 1-stream decode step (forward + sampling): {sum(ops.values())}")
    for name, n in ops.most_common(args.top):
        print(f"  {n:5d} {name}")
    time_decode(engine, 1, 16)  # warm-up
    for s in args.streams:
        runs = [time_decode(engine, s, args.tokens, args.skip_int4) for _ in range(args.repeats)]
        cpu, inside, int4, wall, int4_wall = (min(r[i] for r in runs) for i in range(5))
        mode = " skip-int4" if args.skip_int4 else ""
        print(f"streams={s} threads={args.threads}{mode}: CPU {cpu:.2f} ms/step "
              f"({inside:.2f} in forward + sampling, of which {int4:.2f} in int4 kernels and "
              f"{inside - int4:.2f} in the rest; {cpu - inside:.2f} outside), "
              f"wall {wall:.2f} ms/step = {1e3 * s / wall:.1f} tok/s ({int4_wall:.2f} in int4)")


if __name__ == "__main__":
    main()
