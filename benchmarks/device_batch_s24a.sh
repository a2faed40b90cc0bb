#!/usr/bin/env bash
# The twenty-fourth session's first GPU batch: what the W8A8 GEMVs' two quantising kernels and a
# kernel boundary cost in place in the bs=1 8B fp8 decode graph
# (research/probes/decode_step_takeaway.py, every arm in one process, base first and last).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step take 480 python3 research/probes/decode_step_takeaway.py ${ARMS:-base no_quant \
  no_norm_quant no_silu_quant plus_noop plus_noop2 no_attn base}
cat $OUT/take.txt | grep '"arm"'
