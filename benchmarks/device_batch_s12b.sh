#!/usr/bin/env bash
# The twelfth session's second GPU batch: MLA decode tiles × splits (research probe), where an
# EAGLE-3 step's time goes at batch 1, the fused norm + per-token quantiser against two
# kernels, and the fp8 8B 1000 × 1k/1k run under the profiler. Logs under $OUT.
set -u
source benchmarks/device_steps.sh && install_wheels
step mla_tiles 200 python3 research/probes/mla_decode_tiles.py --out $OUT/mla_tiles.json
grep "TB/s" $OUT/mla_tiles.txt
step spec_trace 120 python3 research/probes/spec_step_trace.py --out $OUT/spec_trace.json
grep "== " $OUT/spec_trace.txt | cut -c1-1500
step norm_quant 60 python3 -c "
import json, sys; sys.path.insert(0, 'benchmarks')
from gpu_bench import _per_weight_ms; from fp8_kernel_bench import bench_rms_norm_quant
print(json.dumps(bench_rms_norm_quant(_per_weight_ms)))"
tail -1 $OUT/norm_quant.txt
step fp8_trace 150 python3 benchmarks/gpu_bench.py --only throughput_trace_8b --extra quant=fp8 kv_cache=fp8 --out $OUT/fp8_trace.json
grep "== " $OUT/fp8_trace.txt | cut -c1-2500
