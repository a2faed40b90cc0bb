#!/usr/bin/env bash
# The twenty-first session's eighth GPU batch: what streaming across launches could gain for
# batch-1 fp8 decode of the 8B: a plain read (stream_read.py) of one layer's fp8 weights
# (218 MB) in one launch against the four projections' reads launched in turn, and of all
# 32 layers' (7.0 GB) in one launch, in run 111's harness (gpu_bench._per_weight_ms).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
READ='import sys, json, torch; sys.path.insert(0, "benchmarks"); import gpu_bench as g
from stream_read import reader
sizes = {"qkv": 6144 * 4096, "o": 4096 * 4096, "gate_up": 28672 * 4096, "down": 4096 * 14336}
layer = sum(sizes.values())
sets = [{k: torch.empty(v, dtype=torch.uint8, device="cuda").random_() for k, v in sizes.items()} for _ in range(3)]
rd = {id(s[k]): reader(s[k]) for s in sets for k in s}
four = g._per_weight_ms(lambda s: [rd[id(s[k])]() for k in sizes], sets)
whole = [torch.cat([s[k] for k in sizes]) for s in sets]
rw = {id(w): reader(w) for w in whole}
one = g._per_weight_ms(lambda w: rw[id(w)](), whole)
del sets, whole
step = torch.empty(32 * layer, dtype=torch.uint8, device="cuda").random_()
rb = reader(step)
big = g._per_weight_ms(lambda w: rb(), [step, step])
r = {"layer_four_launches_us": four * 1e3, "layer_one_launch_us": one * 1e3,
     "step_one_launch_ms": big, "step_TBps": 32 * layer / big / 1e9}
print(json.dumps(r)); json.dump(r, open(sys.argv[1], "w"))'
step read 120 python3 -c "$READ" $OUT/read.json
