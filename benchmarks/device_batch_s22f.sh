#!/usr/bin/env bash
# The twenty-second session's sixth GPU batch: batch-1 decode attention's split and tile sweep
# (research/probes/decode_attn_bs1_sweep.py), bf16 and fp8 caches, 1k and 4k contexts.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step sweep 240 python3 research/probes/decode_attn_bs1_sweep.py --out $OUT/sweep.json
cut -c1-1500 $OUT/sweep.txt
