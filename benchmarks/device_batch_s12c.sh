#!/usr/bin/env bash
# The twelfth session's third GPU batch: the new MLA tiles and the one-pass per-token quantiser:
# their GPU tests, the MLA decode benchmark, and the fp8 8B 1000 x 1k/1k run old (.old: the
# tree before, 26c42c3) then new in one command. Logs under $OUT.
set -u
source benchmarks/device_steps.sh && install_wheels
export PYTHONUNBUFFERED=1
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=60"
step tests 150 $T tests/kernels/test_mla_decode.py tests/kernels/test_mla_deepseek_triton.py tests/kernels/test_fp8_quant.py tests/kernels/test_fp8_scaled_gemm.py tests/kernels/test_fused_moe.py
step mla_decode 60 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_decode.json
for arm in old new; do
  if [ $arm = old ]; then R=$PWD/.old; else R=$PWD; fi
  ( cd $R && PYTHONPATH=/tmp/site:$R step fp8w_$arm 170 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/fp8w_$arm.json )
  grep "== " $OUT/fp8w_$arm.txt | cut -c1-400
done
