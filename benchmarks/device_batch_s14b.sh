#!/usr/bin/env bash
# The fourteenth session's second GPU batch: the fp8 KV cache under an fp8 checkpoint's k/v
# scales (ModelOpt and compressed-tensors, Triton with graphs against the torch backend) and the
# fp8 engine tests; then issue 21's proof 3 (reduced-depth R1, 3 dense + 2 MoE layers at real
# widths, through the server) with block-fp8 weights and the fp8 latent cache.
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 200 $T tests/quant/test_fp8_kv_scales.py tests/quant/test_fp8_gpu.py
grep -h "FAILED\|Error" $OUT/tests.txt | head -8 | cut -c1-300
mkdir -p $OUT/r1 && OUT=$OUT/r1 MODEL=deepseek_r1 CONCS=1,64,256 PPC=2 \
  EXTRA="model.hf_config.num_hidden_layers=5 quant=fp8_block kv_cache=fp8" \
  timeout 330 bash benchmarks/serving_frontier_gpu.sh > $OUT/r1.txt 2>&1
grep -E "ready|Output token|Mean TPOT|Median TTFT|Failed|died" $OUT/r1.txt | cut -c1-200
grep -E "KV cache|fp8|Error" $OUT/r1/server.log | head -5 | cut -c1-300
rm -f $OUT/r1/*.png $OUT/r1/sweep.tgz
