#!/usr/bin/env bash
# The thirteenth session's third GPU batch: the fp8 decode kernels with the next tile's loads
# issued ahead (tests, then research/probes/decode_prefetch.py against the defaults), and issue
# 22's benchmark 3 at two depths in one command, fitted to R1's 61 layers.
set -u
# Ran at 450014f (run 70); the prefetch variants and their probe were reverted after it.
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 --durations=5"
step prefetch_tests 150 $T tests/kernels/test_paged_attention.py tests/kernels/test_mla_decode.py -k "decode_attention or prefetch or page_boundaries"
grep -h "FAILED\|Error" $OUT/prefetch_tests.txt | head -8 | cut -c1-300
step prefetch_probe 200 python3 research/probes/decode_prefetch.py --out $OUT/prefetch.json
grep "^fp8\|^bf16\|^mla" $OUT/prefetch_probe.txt | cut -c1-1200
for L in 4 6; do
  step mtp$L 150 python3 benchmarks/mtp_bench.py --layers $L --ks 1,3 --batches 1,32 --rate 0.81 --out $OUT/mtp$L.json --extra model.max_model_len=4096
done
python3 research/probes/mtp_depth_fit.py $OUT/mtp4.json $OUT/mtp6.json | tee $OUT/mtp_fit.txt
