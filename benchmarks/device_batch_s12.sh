#!/usr/bin/env bash
# The twelfth session's first GPU batch: the GPU tests not run since their code changed (fp8
# weights, MTP after the lazy BlockManager, the sampler's greedy by max), then the fp8 kernels'
# tiles and the fused MoE's expert sort. Each step under its own timeout, logs under $OUT.
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=60 --durations=8"
step fp8 200 $T tests/quant/test_fp8_gpu.py tests/quant/test_fp8_checkpoints.py
step mtp 90 $T tests/engine/test_mtp_spec_decode.py -k on_the_gpu
step sampling 70 $T tests/kernels/test_sampling.py tests/kernels/test_rejection_sampler.py
step fp8_kernels 120 python3 benchmarks/gpu_bench.py --only fp8_kernels --out $OUT/fp8_kernels.json
step fused_moe 60 python3 benchmarks/gpu_bench.py --only fused_moe --out $OUT/fused_moe.json
grep -h "FAILED\|Error" $OUT/*.txt | sort | uniq | head -30 | cut -c1-300
