#!/usr/bin/env bash
# The twelfth session's fourth GPU batch, after h22s (a drafting step stages its inputs once and
# reads its drafts once): the speculative-decoding GPU tests with the new sync test, the EAGLE-3
# step under the profiler, issue 22's benchmarks 1 and 2, and fp8 start-up against bf16.
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=60 --durations=5"
step spec_tests 110 $T tests/engine/test_spec_decode_syncs.py tests/engine/test_spec_decode_graphs.py tests/engine/test_eagle3_spec_decode.py tests/engine/test_mtp_spec_decode.py tests/kernels/test_rejection_sampler.py -k "gpu or graph or sync"
grep -h "FAILED\|Error" $OUT/spec_tests.txt | head -8 | cut -c1-300
step spec_trace 70 python3 research/probes/spec_step_trace.py --out $OUT/spec_trace.json
grep "== " $OUT/spec_trace.txt | cut -c1-900
step eagle3 90 python3 benchmarks/eagle3_bench.py --out $OUT/eagle3.json
grep "/ plain\|decode_tok_s" $OUT/eagle3.txt | cut -c1-200
step eagle3_conc 150 python3 benchmarks/eagle3_bench.py --lengths 3.0 --batches 1,8,32,128 --out $OUT/eagle3_conc.json
grep "/ plain" $OUT/eagle3_conc.txt
step startup_fp8 100 python3 benchmarks/gpu_bench.py --only startup_8b_fp8 --out $OUT/startup_fp8.json
grep "== " $OUT/startup_fp8.txt | cut -c1-600
