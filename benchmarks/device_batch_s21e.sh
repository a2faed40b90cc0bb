#!/usr/bin/env bash
# The twenty-first session's sixth GPU batch: fp8_gemv_mma_probe again, now with each
# projection's weight bytes read by a plain streaming kernel in the same harness.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
export ATOM_COMMIT=${ATOM_COMMIT:-unknown}
step mma 200 python3 research/probes/fp8_gemv_mma_probe.py --out $OUT/mma.json
grep -E "^(qkv|o|gate_up|down) " $OUT/mma.txt | cut -c1-400
