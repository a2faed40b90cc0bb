#!/usr/bin/env bash
# The sixteenth session's third GPU batch: issue 19's energy ceiling for the fp8 run
# (research/probes/energy_probe.py --fp8: joules per FLOP of the e4m3 GEMMs and per byte of the
# fp8 decode attention, sustained) beside the bf16 one, then the fp8 run's decode step traced.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step energy_fp8 150 python3 research/probes/energy_probe.py --fp8 --out $OUT/energy_fp8.json
step energy_bf16 150 python3 research/probes/energy_probe.py --out $OUT/energy_bf16.json
step trace 200 python3 benchmarks/gpu_bench.py --only throughput_trace_8b --extra quant=fp8 kv_cache=fp8 --out $OUT/fp8_trace.json
grep -h "ceiling" $OUT/energy_*.json
