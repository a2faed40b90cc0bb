#!/usr/bin/env bash
# The twenty-second session's fourth GPU batch: loads before the PDL wait (the first weight tile
# of the one-row GEMV and the W8A8 GEMV; decode attention's first tile of the tokens before the
# newest). Their GPU tests, then batch-1 8B decode, fp8 weights + KV and bf16, from this tree
# and from .old (the tree before the change: `git archive <commit> atom conf benchmarks research
# pyproject.toml | tar -x -C .old`; d122685 for run 120), each arm its own process, in the order new, old, old, new.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=100"
[ -n "${NO_TESTS:-}" ] || step tests 200 $T tests/kernels/test_paged_attention.py tests/kernels/test_gemv.py tests/kernels/test_fp8_gemv.py tests/kernels/test_fp8_mma_gemv.py tests/quant/test_fp8_gpu.py
[ -n "${NO_TESTS:-}" ] || grep -h "FAILED\|Error\|passed\|failed" $OUT/tests.txt | head -8 | cut -c1-300
decode_ab
