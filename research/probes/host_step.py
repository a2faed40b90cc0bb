"""Host time of an engine step, the model taken out: where the Python per step goes.

The runner's forward is replaced by a stub that returns zero logits, so what is timed is the
scheduler, `prepare`, sampling, resolving and output processing at a realistic batch (the
nano-vllm workload's shape on a tiny model). On a GPU host this is the time async scheduling must
hide behind each device step. CPU sampling is included (on the GPU it is a Triton kernel).

    python research/probes/host_step.py [--seqs 256] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

import atom
from atom import SamplingParams
from atom.benchmarks.throughput import Workload


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=256)
    ap.add_argument("--profile", action="store_true", help="print the top functions by own time")
    args = ap.parse_args()
    eng = atom.build_engine(atom.compose([
        "model=tiny_llama", "load=dummy", "runtime=cpu", "kv_cache.num_blocks=40000",
        "load.progress_bar=false", "scheduler.async_scheduling=true"]))
    vocab = eng.core.executor.runner.vocab_size
    eng.core.executor.runner.forward = lambda ids, pos, meta, idx: torch.zeros(idx.shape[0], vocab)
    prompts, outs = Workload(num_seqs=args.seqs).make(vocab)
    params = [SamplingParams(temperature=0.6, max_tokens=n, ignore_eos=True) for n in outs]
    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    eng.generate(prompts, params)
    if prof:
        prof.disable()
    dt = time.perf_counter() - t0
    steps = eng.stats().num_steps
    print(f"{args.seqs} sequences: {steps} steps in {dt:.2f} s = {dt / steps * 1e3:.2f} ms per step"
          + (" (profiled)" if prof else ""))
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
