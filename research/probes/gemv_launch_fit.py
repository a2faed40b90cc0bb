"""A GEMV's fixed cost per launch and its streaming rate, fitted from gpu_bench's fp8_kernels
output: time = a + bytes / b over the 8B projections at one row, each at its best variant.

Why: with one kernel per projection, a batch-1 decode step pays `a` per GEMV whatever the bytes;
at fp8 the bytes halve and `a` stays, which bounds how close the step gets to the byte limit
(benchmarks/results/H200.md, run 59).

    python research/probes/gemv_launch_fit.py research/results/h200_b444a62_run59_fp8_kernels.json
"""
from __future__ import annotations

import json
import sys

# Llama-3.1-8B's projections, (N, K): e4m3 weight bytes = N * K.
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


def main() -> None:
    gemv = json.load(open(sys.argv[1]))["fp8_kernels"]["gemv"]
    pts = []
    for name, (n, k) in SHAPES.items():
        row = gemv[f"gemv_8b_{name}_m1"]
        best = min((v["us"], label) for label, v in row.items()
                   if isinstance(v, dict) and "us" in v and not label.startswith("bf16"))
        pts.append((n * k, best[0]))
        print(f"{name}: {n * k / 1e6:.1f} MB, best {best[1]} {best[0]} us")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    a = my - slope * mx
    print(f"fit: {a:.2f} us + bytes / {1e-6 / slope:.2f} TB/s")


if __name__ == "__main__":
    main()
