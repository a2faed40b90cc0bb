#!/usr/bin/env bash
# The twenty-fourth session's third GPU batch: the bs=1 8B fp8 decode graph with every PDL
# kernel releasing the next only as it ends (ATOM_TRITON_PDL=late) against today's release
# after the wait, and rotary + KV store taken out again, in one process
# (research/probes/decode_step_takeaway.py). Ran at 99eb022: the `late` arm and pdl.py's
# ATOM_TRITON_PDL=late are gone from main since (9% slower, H200.md run 130).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step take 300 python3 research/probes/decode_step_takeaway.py ${ARMS:-base late no_rope base late}
cat $OUT/take.txt | grep '"arm"'
