#!/usr/bin/env bash
# The twenty-second session's third GPU batch: the bs=1 8B fp8 decode graph with its rotary +
# KV store and / or its decode attention taken out (research/probes/decode_step_takeaway.py),
# each arm its own process, in both orders; then the MLP chain probe with gate_up's tile sweep.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
for arm in base no_rope no_attn no_rope_attn no_rope_attn no_attn no_rope base; do
  step "take_$arm" 60 python3 research/probes/decode_step_takeaway.py $arm; done
[ -n "${NO_CHAIN:-}" ] || step chain 200 python3 research/probes/fp8_mlp_chain.py --out $OUT/chain.json
