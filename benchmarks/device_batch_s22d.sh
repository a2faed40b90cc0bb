#!/usr/bin/env bash
# The twenty-second session's fourth GPU batch: loads before the PDL wait (the first weight tile
# of the one-row GEMV and the W8A8 GEMV; decode attention's first tile of the tokens before the
# newest). Their GPU tests, then batch-1 8B decode, fp8 weights + KV and bf16, from this tree
# and from .old (the tree before the change: `git archive <commit> atom conf benchmarks research
# pyproject.toml | tar -x -C .old`; d122685 for run 120), each arm its own process, in the order new, old, old, new.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=100"
[ -n "${NO_TESTS:-}" ] || step tests 200 $T tests/kernels/test_paged_attention.py tests/kernels/test_gemv.py tests/kernels/test_fp8_gemv.py tests/kernels/test_fp8_mma_gemv.py tests/quant/test_fp8_gpu.py
[ -n "${NO_TESTS:-}" ] || grep -h "FAILED\|Error\|passed\|failed" $OUT/tests.txt | head -8 | cut -c1-300
ARM='import sys; sys.path.insert(0, "benchmarks"); import gpu_bench as g
extra = ("quant=fp8", "kv_cache=fp8") if sys.argv[1] == "fp8" else ()
r = g.bench_decode("llama3_8b", 1024, 256, extra)
print("arm", sys.argv[1], r["decode_tok_s"], r["graph_replay_ms_bs1"], r["first_tokens"][:8])'
arm() { if [ $1 = old ]; then (cd .old && export PYTHONPATH=/tmp/site:$PWD && step "d_$1_$2_$3" 70 python3 -c "$ARM" $2); else step "d_$1_$2_$3" 70 python3 -c "$ARM" $2; fi; }
for w in ${WEIGHTS:-fp8 bf16}; do i=0; for t in ${ORDER:-new old old new}; do i=$((i+1)); arm $t $w $i; done; done
