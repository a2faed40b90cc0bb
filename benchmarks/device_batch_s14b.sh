#!/usr/bin/env bash
# The fourteenth session's second GPU batch: the fp8 KV cache under an fp8 checkpoint's k/v
# scales (ModelOpt and compressed-tensors, Triton with graphs against the torch backend) and the
# fp8 engine tests; then issue 21's proof 3 (reduced-depth R1, 3 dense + 2 MoE layers at real
# widths, through the server) with block-fp8 weights and the fp8 latent cache.
set -u
# Ran with proof3's body inline (since moved to device_steps.sh, the same commands; its log
# was $OUT/r1.txt).
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 200 $T tests/quant/test_fp8_kv_scales.py tests/quant/test_fp8_gpu.py
grep -h "FAILED\|Error" $OUT/tests.txt | head -8 | cut -c1-300
proof3 r1 $PWD 330
grep -E "KV cache|fp8|Error" $OUT/r1/server.log | head -5 | cut -c1-300
