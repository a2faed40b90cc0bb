#!/usr/bin/env bash
# The twenty-fourth session's fourth GPU batch: batch-1 decode attention's splits, tiles, warps
# and stages swept in place, in the 8B fp8 decode graph (research/probes/decode_step_takeaway.py
# attn_* arms, one process, base first and last).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step take 420 python3 research/probes/decode_step_takeaway.py ${ARMS:-base attn_s16_n128_w4_st3 \
  attn_s16_n128_w4_st2 attn_s16_n128_w4_st1 attn_s16_n64_w4_st2 attn_s8_n128_w4_st3 \
  attn_s8_n128_w4_st2 attn_s4_n128_w4_st3 attn_s16_n128_w8_st3 attn_s16_n128_w2_st3 \
  attn_s32_n64_w4_st2 attn_s2_n128_w8_st3 attn_s1_n128_w8_st3 base}
cat $OUT/take.txt | grep '"arm"'
