#!/usr/bin/env bash
# The twenty-first session's second and third GPU batches: gemv_prefetch again, on the variants
# of runs 108 (520e77e without the in-loop prefetch: L2 lines before the PDL wait only) and 109
# (d802821: the next tile loaded into registers a tile ahead, the first before the wait or
# after it). Both slower than neither; reverted, so gemv_prefetch no longer exists.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step gemv_prefetch 170 python3 benchmarks/gpu_bench.py --only gemv_prefetch --out $OUT/gemv_prefetch.json
python3 - $OUT/gemv_prefetch.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["gemv_prefetch"]
for key, row in r.items():
    if isinstance(row, dict):
        print(key, " ".join(f"{b}:{v['us']}/{v['of_copy']}" if isinstance(v, dict) else f"{b}:{v}" for b, v in row.items()))
PY
