#!/usr/bin/env bash
# The thirteenth session's first GPU batch: the MLA kernel tests with the tiles the twelfth
# session chose (not run since), issue 22's benchmark 3 at its depth (the reduced R1 of 3 dense + 2 MoE layers with MTP
# k = 1 and 3 at the published 0.81 per-draft acceptance, batch 1 and 32), and the first half
# of SmolLM2's GGUF parked on the machine for the next call.
set -u
mkdir -p /tmp/smol && cp .smol/part_aa /tmp/smol/
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 --durations=5"
step mla_tests 300 $T tests/kernels/test_mla_decode.py tests/kernels/test_mla_deepseek_triton.py
grep -h "FAILED\|Error" $OUT/mla_tests.txt | head -8 | cut -c1-300
step mtp5 250 python3 benchmarks/mtp_bench.py --layers 5 --ks 1,3 --batches 1,32 --rate 0.81 --out $OUT/mtp5.json --extra model.max_model_len=4096
grep -v "^\s*$" $OUT/mtp5.txt | tail -12 | cut -c1-300
