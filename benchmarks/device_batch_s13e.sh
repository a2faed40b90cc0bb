#!/usr/bin/env bash
# The thirteenth session's fifth GPU batch, on the machine device_batch_s13d.sh left warm:
# SmolLM2's real weights with quant=fp8 against the float run (issue 19), then tp=1 through
# multiproc against uniproc after the block-table deltas (issue 20).
set -u
cat /tmp/smol/part_aa .smol/part_ab .smol/part_ac > /tmp/smol.gguf && sha256sum /tmp/smol.gguf | cut -c1-16
source benchmarks/device_steps.sh
export SMOLLM2_GGUF=/tmp/smol.gguf
step fp8_quality 120 python3 benchmarks/gpu_bench.py --only fp8_quality_smollm2 --out $OUT/fp8_quality.json
grep "== " $OUT/fp8_quality.txt | cut -c1-700
ONLY=decode_8b,throughput_small bash benchmarks/ab_multiproc_tp1.sh
