#!/usr/bin/env bash
# The twenty-second session's second GPU batch: the 8B's fp8 MLP at one row, 32 layers in one
# graph, with the W8A8 GEMV's parts taken away one at a time (research/probes/fp8_mlp_chain.py).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step chain 200 python3 research/probes/fp8_mlp_chain.py --out $OUT/chain.json
