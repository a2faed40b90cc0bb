#!/usr/bin/env bash
# The twenty-second session's fifth GPU batch: which of run 119's three pre-wait loads cost the
# fp8 decode 15%. Batch-1 8B decode from .v1 (run 119's tree with the W8A8 GEMV's as before) and
# .v2 (with decode attention's as before), fp8 weights + KV, and .v2 in bf16 (the one-row GEMV's
# alone), each arm its own process, twice.
#   carry [".whl", ".v1", ".v2"]
set -u
source benchmarks/device_steps.sh && install_wheels
ARM='import sys; sys.path.insert(0, "benchmarks"); import gpu_bench as g
extra = ("quant=fp8", "kv_cache=fp8") if sys.argv[1] == "fp8" else ()
r = g.bench_decode("llama3_8b", 1024, 256, extra)
print("arm", sys.argv[1], r["decode_tok_s"], r["graph_replay_ms_bs1"], r["first_tokens"][:8])'
arm() { (cd $1 && export PYTHONPATH=/tmp/site:$PWD && step "d${1}_$2_$3" 70 python3 -c "$ARM" $2); }
for i in 1 2; do arm .v1 fp8 $i; arm .v2 fp8 $i; arm .v2 bf16 $i; done
