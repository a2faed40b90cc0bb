#!/usr/bin/env bash
# The eleventh session's GPU batch after merging h21f8 and h22g: the new attention routing and
# graph paths first, each step under its own timeout, logs under $OUT as they finish.
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=50 --durations=8"
step attn 100 $T tests/kernels/test_multi_query_attention.py tests/kernels/test_paged_attention.py tests/kernels/test_gpu_runner_path.py
step graphs 130 $T tests/engine/test_spec_decode_graphs.py
step mtp 70 $T -x tests/engine/test_mtp_spec_decode.py -k on_the_gpu
step moe 80 $T tests/quant/test_fp8_experts.py tests/kernels/test_fused_moe.py
step decode 60 python3 benchmarks/gpu_bench.py --only decode_8b --out $OUT/decode.json
grep -h "== " $OUT/decode.txt | cut -c1-300
step mtp_bench 90 python3 benchmarks/mtp_bench.py --layers 4 --ks 1 --out $OUT/mtp_k1.json --extra model.max_model_len=4096
tail -5 $OUT/mtp_bench.txt
