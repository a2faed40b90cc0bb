#!/usr/bin/env bash
# The twenty-fourth session's fifth GPU batch: each kernel's marginal cost in the batch-1 8B
# decode graph, fp8 weights + KV then bf16 (research/probes/decode_step_timeline.py).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tl_fp8 150 python3 research/probes/decode_step_timeline.py --out $OUT/timeline_fp8.json
step tl_bf16 150 python3 research/probes/decode_step_timeline.py --bf16 --out $OUT/timeline_bf16.json
for f in fp8 bf16; do python3 -c "
import json; d = json.load(open('$OUT/timeline_$f.json'))
print('$f', d['kernels_per_replay'], d['replay_span_us'], d['replay_ms'])
for r in d['rows'][:14]: print(r['total_marginal_us'], r['marginal_us'], r['duration_us'], r['lead_us'], r['count_per_replay'], r['pair'])"; done
