#!/usr/bin/env bash
# The twenty-first session's seventh GPU batch: batch-1 decode of the 8B with fp8 weights + KV
# with the one-row GEMV's norm and SiLU fusions at bf16's thresholds (today: the norm fused
# into qkv only, gate_up and down after kernels of their own) and with them past every 8B
# width, each arm its own process (triton_backend.FUSED_NORM_MAX_N / FUSED_SILU_MAX_K).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
ARM='import sys, json; sys.path.insert(0, "benchmarks"); import gpu_bench as g
from atom.kernels import triton_backend as tb
norm, silu = int(sys.argv[1]), int(sys.argv[2])
tb.FUSED_NORM_MAX_N = norm or tb.FUSED_NORM_MAX_N
tb.FUSED_SILU_MAX_K = silu or tb.FUSED_SILU_MAX_K
r = g.bench_decode("llama3_8b", 1024, 256, ("quant=fp8", "kv_cache=fp8"))
print("arm", norm, silu, r["decode_tok_s"], r["graph_replay_ms_bs1"], r["first_tokens"][:10])'
for arm in "0 0" "65536 0" "0 65536" "65536 65536" "0 0"; do
  step "decode_${arm// /_}" 120 python3 -c "$ARM" $arm
done
