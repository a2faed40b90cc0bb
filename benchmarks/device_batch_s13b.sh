#!/usr/bin/env bash
# The thirteenth session's second GPU batch, on the machine the first left warm (its wheels in
# /tmp/site, SmolLM2's first 45 MB in /tmp/smol): SmolLM2's real weights with quant=fp8 against
# the float run (issue 19's quality proof), then the GPU kernel and engine tests but MLA's.
set -u
cat /tmp/smol/part_aa .smol/part_ab .smol/part_ac > /tmp/smol.gguf && sha256sum /tmp/smol.gguf | cut -c1-16
source benchmarks/device_steps.sh
export SMOLLM2_GGUF=/tmp/smol.gguf
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 --durations=5"
step fp8_quality 150 python3 benchmarks/gpu_bench.py --only fp8_quality_smollm2 --out $OUT/fp8_quality.json
grep "== \|ppl\|greedy" $OUT/fp8_quality.txt | tail -6 | cut -c1-600
step gpu_tests 380 $T tests/kernels tests/engine --deselect tests/kernels/test_mla_decode.py --deselect tests/kernels/test_mla_deepseek_triton.py
grep -h "FAILED\|Error" $OUT/gpu_tests.txt | head -12 | cut -c1-300
