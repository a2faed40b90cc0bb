#!/usr/bin/env bash
# The twenty-fourth session's eighth GPU batch: batch-1 decode attention's splits merged by a
# launch of their own (a program a query head, or a kv head's four) instead of the last split
# after a counter, in place in the 8B fp8 decode graph (decode_attn_parts.py's SEP_MERGE).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step take 300 python3 research/probes/decode_step_takeaway.py ${ARMS:-base parts_full \
  parts_no_merge+sep_merge parts_no_merge+sep_merge_kv parts_no_merge parts_full \
  parts_no_merge+sep_merge base}
cat $OUT/take.txt | grep '"arm"'
