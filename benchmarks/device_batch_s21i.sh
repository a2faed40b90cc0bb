#!/usr/bin/env bash
# The twenty-first session's tenth GPU batch (not run: the device time ran out): the W8A8
# GEMV (fp8_mma_gemv.py) at a few rows of an fp8 weight after a norm or SiLU (the 8B's gate_up,
# and down in 4 K slices, at decode). Its GPU tests and the fp8 linears', then batch-1 8B decode
# with fp8 weights + KV with it and without it (takes() off), each arm its own process, in both
# orders.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=100"
[ -n "${NO_TESTS:-}" ] || step tests 110 $T tests/kernels/test_fp8_mma_gemv.py tests/quant/test_fp8_gpu.py -k "mma or fused_norm or fused_silu or w8a8 or dispatched or triton_engine"
[ -n "${NO_TESTS:-}" ] || grep -h "FAILED\|Error\|passed\|failed" $OUT/tests.txt | head -8 | cut -c1-300
ARM='import sys; sys.path.insert(0, "benchmarks"); import gpu_bench as g
from atom.kernels.triton import fp8_mma_gemv
if sys.argv[1] == "off":
    fp8_mma_gemv.takes = lambda *a, **k: False
r = g.bench_decode("llama3_8b", 1024, 256, ("quant=fp8", "kv_cache=fp8"))
print("arm", sys.argv[1], r["decode_tok_s"], r["graph_replay_ms_bs1"], r["first_tokens"][:10])'
i=0; for arm in ${ARMS:-on off on off}; do i=$((i+1)); step "decode_${i}_$arm" 60 python3 -c "$ARM" $arm; done
