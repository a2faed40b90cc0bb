#!/usr/bin/env bash
# The twenty-third session's first batch: GQA decode loading its first tile's block-table
# entries before the PDL wait (its GPU tests, then batch-1 8B decode fp8 + bf16 from this tree
# and from .old, `git archive <commit> atom conf benchmarks research pyproject.toml | tar -x -C
# .old`, order new, old, old, new), then research/probes/decode_step_floor.py.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_paged_attention.py
grep -h "FAILED\|passed\|failed" $OUT/tests.txt | head -5 | cut -c1-300
decode_ab
step floor 150 python3 research/probes/decode_step_floor.py --out $OUT/floor.json
