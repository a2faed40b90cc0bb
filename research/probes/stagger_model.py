"""Would admitting the 8B run's 1000 requests in a staggered way take fewer steps or less time?

Why: the 8B 1000 x 1k/1k run admits every request that fits, so sequences start together, grow
together and finish together (waves of ~415 in bf16); staggered starts would mix contexts and
might fit more sequences on average. This models each policy step by step, with known lengths
(ignore_eos) and no preemption: a request is admitted only if the peak KV of everything running
stays within the cache. Step time is the traced per-step cost (run 15, results/H200.md): decode
attention per KV token, GEMMs per row (with the weight-read floor) and a fixed 2.6 ms. It is a
model, not a measurement: it reproduces the measured run (~104 s) under greedy admission.

    python research/probes/stagger_model.py   # bf16 KV (851k tokens; the rates are bf16's)
"""
from __future__ import annotations

import argparse
import json

import numpy as np

ATTN_MS_PER_KV_TOKEN = 13.67 / 433e3  # run 15: 13.67 ms for 415 sequences at mean context 1,044
GEMM_MS_PER_ROW = 9.5 / 415  # run 15: 9.5 ms of GEMMs for 415 rows
GEMM_FLOOR_MS = 3.9  # 16 GB of weights at 4.15 TB/s
FIXED_MS = 2.6  # small kernels (1.5 ms) and gaps between kernels (1.1 ms) per step


def peak_fits(admitted: list[int], capacity: int, prompt: int, output: int) -> bool:
    """Whether the KV of sequences admitted at these steps (sorted) stays within capacity: the
    total only drops when one ends, so checking the step before each end is enough."""
    a = np.asarray(admitted, dtype=np.int64)
    u = np.unique(a) + output - 1
    first = np.searchsorted(a, u - output + 1, side="left")  # first still running at u
    sums = np.concatenate([[0], np.cumsum(a)])
    usage = (len(a) - first) * (prompt + u) - (sums[-1] - sums[first])
    return bool(usage.max() <= capacity)


def run(capacity: int, first: int, per_step: float, requests: int = 1000, prompt: int = 1024,
        output: int = 1024) -> dict:
    """`first` requests at most at step 0, then at most `per_step` a step (both: if they fit)."""
    running: list[int] = []
    waiting, step, ms, credit = requests, 0, 0.0, 0.0
    while waiting or running:
        running = [a for a in running if a + output > step]
        credit += per_step
        want = min(waiting, (first if step == 0 else 0) + int(credit))
        credit -= int(credit)
        lo, hi = 0, want  # the most of `want` that fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if peak_fits(running + [step] * mid, capacity, prompt, output) \
                else (lo, mid - 1)
        running += [step] * lo
        waiting -= lo
        kv_tokens = sum(prompt + step - a for a in running)
        gemm = max(GEMM_FLOOR_MS, (len(running) + lo * prompt) * GEMM_MS_PER_ROW)
        ms += gemm + kv_tokens * ATTN_MS_PER_KV_TOKEN + FIXED_MS
        step += 1
    return {"first": first, "per_step": per_step, "steps": step, "model_seconds": round(ms / 1e3, 1),
            "model_output_tok_s": round(requests * output / (ms / 1e3))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv-tokens", type=int, default=851_248, help="53,203 blocks of 16 (bf16)")
    args = ap.parse_args()
    greedy = 10 ** 6
    for first, per_step in [(greedy, greedy), (350, 0.3), (300, 0.5), (300, 1), (200, 1),
                            (300, 2), (150, 2), (100, 3)]:
        print(json.dumps(run(args.kv_tokens, first, per_step)), flush=True)


if __name__ == "__main__":
    main()
