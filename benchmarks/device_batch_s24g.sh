#!/usr/bin/env bash
# The twenty-fourth session's seventh GPU batch: batch-1 decode attention with its parts taken
# out one at a time, in place in the 8B fp8 decode graph (research/probes/decode_attn_parts.py
# through decode_step_takeaway.py's parts_* arms, one process, base first and last).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step take 420 python3 research/probes/decode_step_takeaway.py ${ARMS:-base parts_full \
  parts_no_merge parts_no_kv parts_no_dots parts_pre_kv parts_no_merge+no_kv \
  parts_no_merge+no_kv+no_dots no_attn parts_full base}
cat $OUT/take.txt | grep '"arm"'
