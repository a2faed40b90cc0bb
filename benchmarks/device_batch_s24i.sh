#!/usr/bin/env bash
# The twenty-fourth session's ninth GPU batch: GQA decode's splits merged by a launch of their
# own (a program a sequence and query head) instead of the last split after a counter. The
# paged-attention and GPU runner tests, then batch-1 8B decode fp8 + bf16 in this tree and .old
# (`git archive <commit> atom conf benchmarks research pyproject.toml | tar -x -C .old`), order
# new, old, old, new.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 130 python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=100 \
  tests/kernels/test_paged_attention.py tests/kernels/test_gpu_runner_path.py
grep -h "FAILED\|passed\|failed" $OUT/tests.txt | head -5 | cut -c1-300
decode_ab
grep -h "^arm" $OUT/d_*.txt
