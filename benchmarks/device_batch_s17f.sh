#!/usr/bin/env bash
# The seventeenth session's sixth GPU batch: MLA decode's bf16 16-head tiles after the halves
# (64-token tiles, 4 warps, two programs an SM), its GPU tests and issue 21's MLA benchmark.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py
step mla 40 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla.json
grep -h "mla_decode h16" $OUT/mla.txt | cut -c1-160
