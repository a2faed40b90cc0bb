#!/usr/bin/env bash
# The eighteenth session's fourth GPU batch: where an MLA decode call's time goes at short
# contexts (research/probes/mla_decode_phases.py: each kernel's device time, the call from a CUDA
# graph, and a merge that loads every split of a head at once).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step phases 200 python3 research/probes/mla_decode_phases.py --out $OUT/phases.json
cut -c1-400 $OUT/phases.txt
