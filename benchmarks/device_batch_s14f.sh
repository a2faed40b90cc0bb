#!/usr/bin/env bash
# The fourteenth session's sixth GPU batch: issue 19's 8B 1000 x 1k/1k with fp8 weights and KV at
# the default batch cap (512) and at 768 (the fp8 cache holds ~888 sequences of 2k tokens; the
# capture sizes stop at 512, so steps above it run eager), in one command.
set -u
source benchmarks/device_steps.sh && install_wheels
step cap512 170 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/cap512.json
step cap768 170 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --extra scheduler.max_num_seqs=768 --out $OUT/cap768.json
grep -h "== " $OUT/cap*.txt | cut -c1-420
