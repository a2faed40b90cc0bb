"""Host milliseconds per decode step at the 8B throughput run's operating point, on the CPU.

Why: a GPU step that waits for the host shows as idle time in the traces (run 15: 4.3% of an
8B decode step). With async scheduling the host builds step N+1 while the device runs step N,
so the host only matters if its work per step approaches the device's (~25 ms there). This
times the host's parts of a step (schedule, prepare, sampling batch, resolve, output processing)
for 415 running sequences of ~1.5k tokens with a tiny model; its CPU forward and sampling, which
a GPU runs, are left out of host_ms_per_step.

    PYTHONPATH=. python research/probes/host_step_cost.py [--seqs 415] [--context 1500]
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

import torch

import atom
from atom.sampling_params import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=415)
    ap.add_argument("--context", type=int, default=1500)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    eng = atom.build_engine(atom.compose([
        "model=tiny_llama", "load=dummy", "runtime=cpu", "kv_cache.num_blocks=60000",
        "kv_cache.enable_prefix_caching=false", "scheduler.max_num_seqs=1024",
        "scheduler.max_num_batched_tokens=65536", "runtime.enable_log_stats=false",
        "model.max_model_len=8192"]))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 200, (a.context,), generator=g).tolist() for _ in range(a.seqs)]
    eng.add_request(prompts, [SamplingParams(temperature=0.6, max_tokens=a.steps + 50,
                                             ignore_eos=True)] * a.seqs)
    core = eng.core
    while any(s.num_computed_tokens < s.num_prompt_tokens for s in core.scheduler.running) \
            or core.scheduler.waiting:
        eng.step()
    for _ in range(3):
        eng.step()
    ms: dict[str, float] = {}

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        ms[name] = 0.0

        def wrapper(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                ms[name] += (time.perf_counter() - t0) * 1e3
        return wrapper
    core.scheduler.schedule = timed("schedule", core.scheduler.schedule)
    core.executor.runner.prepare = timed("prepare", core.executor.runner.prepare)
    core.executor.runner._sampling_batch = timed("sampling_batch", core.executor.runner._sampling_batch)
    core.executor.runner.forward = timed("forward (CPU, not host work on a GPU)", core.executor.runner.forward)
    core._resolve = timed("resolve", core._resolve)
    eng.processor.process = timed("output processing", eng.processor.process)
    from atom.runner import model_runner
    model_runner.sample = timed("sampling (CPU, queued on a GPU)", model_runner.sample)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        eng.step()
    wall = (time.perf_counter() - t0) * 1e3
    per_step = {k: round(v / a.steps, 2) for k, v in ms.items()}
    device_work = (per_step.pop("forward (CPU, not host work on a GPU)")
                   + per_step.pop("sampling (CPU, queued on a GPU)"))
    print(json.dumps({"seqs": len(core.scheduler.running), "context": a.context,
                      "ms_per_step": per_step,
                      "host_ms_per_step": round(wall / a.steps - device_work, 2)}))


if __name__ == "__main__":
    main()
