#!/usr/bin/env bash
# The fourteenth session's fourth GPU batch: block-fp8 weights at one row through the GEMV
# (block scales taken into x), against the tree before it (.old, a6e73c2),
# in one command: the block-fp8 GPU tests, then issue 21's proof 3 (reduced-depth R1, 3 dense + 2
# MoE layers at real widths, through the server, quant=fp8_block kv_cache=fp8) in both trees.
#   git archive a6e73c2 atom conf benchmarks pyproject.toml | tar -x -C .old ; carry [".whl", ".old"]
set -u
# Ran with proof3's body inline (since moved to device_steps.sh, the same commands).
source benchmarks/device_steps.sh && install_wheels
ROOT=$PWD
ln -sfn $ROOT/.whl $ROOT/.old/.whl  # serving_frontier_gpu.sh installs from ./.whl
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 200 $T tests/kernels/test_fp8_gemv.py tests/kernels/test_gemv.py tests/kernels/test_fp8_block_gemm.py tests/quant/test_fp8_gpu.py
grep -h "FAILED\|Error" $OUT/tests.txt | head -8 | cut -c1-300
proof3 new $ROOT 200
proof3 old $ROOT/.old 200
step decode_8b_fp8w 150 python3 benchmarks/gpu_bench.py --only decode_8b_fp8w --out $OUT/decode_fp8w.json
grep -h "== " $OUT/decode_8b_fp8w.txt | cut -c1-300
