"""Where a CPU decode step of the embedded default goes, op by op and input shape: torch's
profiler over one greedy generation of 64 tokens for N streams at one thread (a warm-up
generation first), the costliest ops by self CPU time. The C kernels' calls are not torch ops
and do not appear; cpu_decode_ops.py splits a step into int4 kernels and the rest.

    python research/probes/cpu_step_profile.py [--streams 8] [--rows 16]
"""
from __future__ import annotations

import argparse

from torch.profiler import ProfilerActivity, profile

import atom
from atom import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--rows", type=int, default=16)
    args = ap.parse_args()
    engine = atom.build_engine(atom.compose([
        "load.progress_bar=false", "runtime.device=cpu", "runtime.cpu_threads=1",
        "runtime.enable_log_stats=false"]))
    prompts = [f"Prompt number {i} says that" for i in range(args.streams)]
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    engine.generate(prompts, params)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        engine.generate(prompts, params)
    print(prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=40,
        max_shapes_column_width=70))


if __name__ == "__main__":
    main()
