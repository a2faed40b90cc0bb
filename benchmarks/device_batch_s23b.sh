#!/usr/bin/env bash
# The twenty-third session's second batch: GQA decode loading its first tile's rows older than
# the newest token before the PDL wait (over s23a's block-table entries there). Its GPU tests
# (paged attention, the GPU runner path, speculative decoding's graphs and MTP: drafts write
# the newest rows), then batch-1 8B decode fp8 + bf16 from this tree and from .old (`git
# archive <commit> atom conf benchmarks research pyproject.toml | tar -x -C .old`), order new,
# old, old, new.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 tests/kernels/test_paged_attention.py tests/kernels/test_gpu_runner_path.py tests/engine/test_spec_decode_graphs.py tests/engine/test_mtp_spec_decode.py
grep -h "FAILED\|passed\|failed" $OUT/tests.txt | head -5 | cut -c1-300
ARM='import sys; sys.path.insert(0, "benchmarks"); import gpu_bench as g
extra = ("quant=fp8", "kv_cache=fp8") if sys.argv[1] == "fp8" else ()
r = g.bench_decode("llama3_8b", 1024, 256, extra)
print("arm", sys.argv[1], r["decode_tok_s"], r["graph_replay_ms_bs1"], r["first_tokens"][:8])'
arm() { if [ $1 = old ]; then (cd .old && export PYTHONPATH=/tmp/site:$PWD && step "d_$1_$2_$3" 70 python3 -c "$ARM" $2); else step "d_$1_$2_$3" 70 python3 -c "$ARM" $2; fi; }
for w in ${WEIGHTS:-fp8 bf16}; do i=0; for t in ${ORDER:-new old old new}; do i=$((i+1)); arm $t $w $i; done; done
