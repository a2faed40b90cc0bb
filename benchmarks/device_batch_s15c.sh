#!/usr/bin/env bash
# The fifteenth session's third GPU batch: issue 21's fp8 MLA decode at 16 heads, the default
# (e4m3 pairs converted in registers for both dots, unpipelined) against fp8_split (the scores'
# operand from plain, pipelined e4m3 loads) over tiles (research/probes/mla_fp8_split_probe.py),
# with the MLA decode GPU tests first.
#   carry [".whl"]; ran at 341e246 (the variant and its probe were dropped after run 86: git show 341e246)
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py
step probe 400 python3 research/probes/mla_fp8_split_probe.py --out $OUT/mla_fp8_split.json
grep -h "h16_fp8" $OUT/probe.txt | cut -c1-300
