#!/usr/bin/env bash
# The sixteenth session's second GPU batch: issue 19's down projection with its activation
# quantized per token as SiLU-and-mul computes it (fp8_quant.silu_mul_quant), its GPU tests, then
# the 8B 1000 x 1k/1k with fp8 weights and KV from this tree and from the tree before (.old).
#   carry [".whl", ".old"]; .old = git archive fc9df2c atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fp8_quant.py tests/quant/test_fp8_gpu.py
step new 175 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step old 175 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/old.json)
grep -h "== " $OUT/new.txt $OUT/old.txt | cut -c1-420
