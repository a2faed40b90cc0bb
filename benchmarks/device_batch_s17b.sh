#!/usr/bin/env bash
# The seventeenth session's second GPU batch: the GQA kernel's fp8 tiles after the pinned e4m3
# conversion (research/probes/fp8_attention_ab.py --sweep), then issue 19's 8B 1000 x 1k/1k with
# fp8 weights and KV from this tree and from the tree before (.old), the GPU's clock and power
# recorded by the bench.
#   carry [".whl", ".old"]; .old = git archive dae49ac atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
step sweep 120 python3 research/probes/fp8_attention_ab.py --sweep --out $OUT/sweep.json
step new 175 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step old 175 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/old.json)
grep -h "gqa_fp8" $OUT/sweep.txt | sort -t: -k2 -rn | head -30
grep -h "== " $OUT/new.txt $OUT/old.txt | cut -c1-420
