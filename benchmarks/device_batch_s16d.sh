#!/usr/bin/env bash
# The sixteenth session's fourth GPU batch: the GPU tests over the kernels this session touched
# (SiLU-and-mul now shares its row code with the fused quantiser) and the engine paths that run
# them: activation, fp8 quant and Triton path, the GPU runner, the fp8 engine tests, and the
# SmolLM2 oracle.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step kernels 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_activation.py tests/kernels/test_fp8_quant.py tests/kernels/test_gemv.py tests/kernels/test_gpu_runner_path.py tests/kernels/test_paged_attention.py
step engine 260 python3 -m pytest -q -m gpu -p no:cacheprovider tests/quant tests/engine/test_spec_decode_graphs.py tests/engine/test_kv_capacity.py
grep -h "passed\|failed\|error" $OUT/kernels.txt $OUT/engine.txt | tail -6
