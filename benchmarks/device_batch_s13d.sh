#!/usr/bin/env bash
# The thirteenth session's fourth GPU batch, after h22v (drafting queued behind the verify
# step's device verdict) and h20bt (block tables to the ranks as deltas): their GPU tests, the
# EAGLE-3 step under the profiler, issue 22's benchmark 1; SmolLM2's first 45 MB parked for
# device_batch_s13e.sh.
set -u
mkdir -p /tmp/smol && cp .smol/part_aa /tmp/smol/
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 --durations=5"
step spec_tests 200 $T tests/engine/test_spec_decode_syncs.py tests/engine/test_spec_decode_graphs.py tests/engine/test_eagle3_spec_decode.py tests/engine/test_mtp_spec_decode.py tests/kernels/test_rejection_sampler.py tests/engine/test_multiproc_block_tables.py
grep -h "FAILED\|Error" $OUT/spec_tests.txt | head -8 | cut -c1-300
step oracle_tests 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py -k oracle
step spec_trace 80 python3 research/probes/spec_step_trace.py --out $OUT/spec_trace.json
grep "== " $OUT/spec_trace.txt | cut -c1-900
step eagle3 100 python3 benchmarks/eagle3_bench.py --out $OUT/eagle3.json
grep "/ plain\|decode_tok_s" $OUT/eagle3.txt | cut -c1-200
