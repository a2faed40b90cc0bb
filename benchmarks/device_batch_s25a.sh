#!/usr/bin/env bash
# For the next session's first GPU call, on `git apply research/patches/h22_mq_merge_per_head.patch`
# with `.old` = the commit it applies to: the multi-query (speculative verify) kernel's partials
# merged by the decode kernel's merge launch, a program a (token, query head), instead of its own
# program a (token, kv head) (the form run 135 found slower for decode). Its GPU tests, then
# EAGLE-3 on the 8B at batch 1, k = 7, forced acceptance lengths 1.0 and 3.0
# (benchmarks/eagle3_bench.py: every verify step runs the multi-query kernel), new / old by
# default (ORDER), each arm its own process.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_multi_query_attention.py \
  tests/engine/test_spec_decode_graphs.py
grep -h "FAILED\|passed\|failed" $OUT/tests.txt | head -5 | cut -c1-300
i=0; for t in ${ORDER:-new old}; do i=$((i+1))
  in_tree $t step "spec_${t}_$i" 150 python3 benchmarks/eagle3_bench.py --lengths 1.0,3.0; done
grep -h "tok/s\|accept" $OUT/spec_*.txt | head -20
