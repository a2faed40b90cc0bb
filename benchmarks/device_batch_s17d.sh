#!/usr/bin/env bash
# The seventeenth session's fourth GPU batch: MLA decode with the latent's first 512 dims in two
# halves (research/probes/mla_halves_probe.py: three independent score dots, two output
# accumulators) against atom's kernel, bf16 and fp8, 16 heads, its output checked against atom's.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step halves 200 python3 research/probes/mla_halves_probe.py --out $OUT/halves.json
cat $OUT/halves.txt | cut -c1-900
