#!/usr/bin/env bash
# The thirteenth session's last GPU batch, after h22a (async scheduling of verify steps with a
# runner-side drafter): the speculative-decoding GPU tests, the EAGLE-3 step under the
# profiler, issue 22's benchmarks 1 and 2, then benchmark 3 at two depths with the fit.
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 --durations=5"
step spec_tests 150 $T tests/engine/test_spec_decode_syncs.py tests/engine/test_spec_decode_graphs.py tests/engine/test_eagle3_spec_decode.py tests/engine/test_mtp_spec_decode.py tests/kernels/test_rejection_sampler.py tests/engine/test_multiproc_block_tables.py tests/engine/test_async_scheduling.py tests/engine/test_draft_model_spec_decode.py
grep -h "FAILED\|Error" $OUT/spec_tests.txt | head -8 | cut -c1-300
step spec_trace 60 python3 research/probes/spec_step_trace.py --out $OUT/spec_trace.json
grep "== " $OUT/spec_trace.txt | cut -c1-700
step eagle3 60 python3 benchmarks/eagle3_bench.py --out $OUT/eagle3.json
grep "/ plain" $OUT/eagle3.txt | cut -c1-200
step eagle3_conc 120 python3 benchmarks/eagle3_bench.py --lengths 3.0 --batches 1,8,32,128 --out $OUT/eagle3_conc.json
grep "/ plain" $OUT/eagle3_conc.txt
for L in 4 6; do
  step mtp$L 60 python3 benchmarks/mtp_bench.py --layers $L --ks 1,3 --batches 1,32 --rate 0.81 --out $OUT/mtp$L.json --extra model.max_model_len=4096
done
python3 research/probes/mtp_depth_fit.py $OUT/mtp4.json $OUT/mtp6.json | tee $OUT/mtp_fit.txt
