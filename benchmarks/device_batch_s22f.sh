#!/usr/bin/env bash
# The twenty-second session's sixth GPU batch: batch-1 decode attention's split and tile sweep
# (research/probes/decode_attn_bs1_sweep.py), bf16 and fp8 caches, 1k and 4k contexts; then
# batch-1 8B decode from this tree against .old (`git archive d122685 atom conf benchmarks
# research pyproject.toml | tar -x -C .old`), fp8 weights + KV and bf16, each arm its own
# process, in the order new, old, old, new: run 121's gain in one call.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
[ -n "${NO_SWEEP:-}" ] || step sweep 200 python3 research/probes/decode_attn_bs1_sweep.py --out $OUT/sweep.json
[ -n "${NO_SWEEP:-}" ] || cut -c1-1500 $OUT/sweep.txt
NO_TESTS=1 bash benchmarks/device_batch_s22d.sh
