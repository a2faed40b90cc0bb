#!/usr/bin/env bash
# The twenty-fourth session's sixth GPU batch: the 8B's qkv at one row on the W8A8 GEMV after
# the quantising norm (rms_norm_quant, 2 K slices) instead of the fused-norm weight-only GEMV.
# The fp8 GEMV / linear GPU tests, then batch-1 fp8 decode in this tree and .old (`git archive
# <commit> atom conf benchmarks research pyproject.toml | tar -x -C .old`), ORDER (default new
# old old new), then this tree's marginal-cost timeline.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fp8_mma_gemv.py \
  tests/quant/test_fp8_gpu.py
grep -h "FAILED\|passed\|failed\|Error" $OUT/tests.txt | head -8 | cut -c1-300
WEIGHTS=fp8 decode_ab
grep -h "^arm" $OUT/d_*.txt
step tl_fp8 150 python3 research/probes/decode_step_timeline.py --out $OUT/timeline_fp8.json
python3 -c "
import json; d = json.load(open('$OUT/timeline_fp8.json'))
print(d['kernels_per_replay'], d['replay_span_us'], d['replay_ms'])
for r in d['rows'][:12]: print(r['total_marginal_us'], r['marginal_us'], r['duration_us'], r['lead_us'], r['count_per_replay'], r['pair'])"
