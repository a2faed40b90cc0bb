#!/usr/bin/env bash
# The twenty-first session's fourth GPU batch: a one-row fp8 GEMV on the e4m3 tensor cores
# (W8A8, weight rows as wgmma's M) against fp8_gemv and the bf16 GEMV on the 8B projections
# (research/probes/fp8_gemv_mma_probe.py).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
export ATOM_COMMIT=${ATOM_COMMIT:-unknown}
step mma 400 python3 research/probes/fp8_gemv_mma_probe.py --out $OUT/mma.json
grep -E "^(qkv|o|gate_up|down) " $OUT/mma.txt | cut -c1-400
