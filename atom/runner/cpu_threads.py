"""How many threads the CPU forward runs on when `runtime.cpu_threads` is 0.

OpenMP threads that outnumber the cores free to them spin at every barrier: a 2-thread matmul
on 2 cores with one of them busy ran ~50x slower than on 1 thread. So the default depends on
who else needs the machine:
- offline (LLMEngine, `job=generate`, the benchmarks): nothing else runs, every core computes;
- serving (the server's core process): the API process and, often, its clients share the host,
  so one core is left to them.
An `OMP_NUM_THREADS` in the environment wins over both: whoever set it sized the machine.
"""
from __future__ import annotations

import os


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_threads(requested: int, serving: bool) -> int:
    if requested > 0:
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = available_cores()
    return max(1, cores - 1) if serving else cores
