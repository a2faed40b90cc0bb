#!/usr/bin/env bash
# The twenty-third session's second batch: GQA decode loading its first tile's rows older than
# the newest token before the PDL wait (over s23a's block-table entries there). Its GPU tests
# (paged attention, the GPU runner path, speculative decoding's graphs and MTP: drafts write
# the newest rows), then batch-1 8B decode fp8 + bf16 from this tree and from .old (`git
# archive <commit> atom conf benchmarks research pyproject.toml | tar -x -C .old`), order new,
# old, old, new.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 tests/kernels/test_paged_attention.py tests/kernels/test_gpu_runner_path.py tests/engine/test_spec_decode_graphs.py tests/engine/test_mtp_spec_decode.py
grep -h "FAILED\|passed\|failed" $OUT/tests.txt | head -5 | cut -c1-300
decode_ab
