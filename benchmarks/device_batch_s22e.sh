#!/usr/bin/env bash
# The twenty-second session's fifth GPU batch: which of run 119's three pre-wait loads cost the
# fp8 decode 15%. Batch-1 8B decode from .v1 (run 119's tree with the W8A8 GEMV's as before) and
# .v2 (with decode attention's as before), fp8 weights + KV, and .v2 in bf16 (the one-row GEMV's
# alone), each arm its own process, twice.
#   carry [".whl", ".v1", ".v2"]
set -u
source benchmarks/device_steps.sh && install_wheels
arm() { (cd $1 && export PYTHONPATH=/tmp/site:$PWD && step "d${1}_$2_$3" 70 python3 -c "$DECODE_ARM" $2); }
for i in 1 2; do arm .v1 fp8 $i; arm .v2 fp8 $i; arm .v2 bf16 $i; done
