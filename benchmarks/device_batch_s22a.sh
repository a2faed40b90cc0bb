#!/usr/bin/env bash
# The twenty-second session's first table: batch-1 8B decode with fp8 weights + KV, kernel by
# kernel inside one replay of the bs=1 graph (CUPTI), with the W8A8 GEMV (fp8_mma_gemv) on and
# off, each arm its own process: where the step's 3 ms go after the W8A8 GEMV took gate_up/down.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
ARM='import sys, json; sys.path.insert(0, "benchmarks"); import gpu_bench as g
from atom.kernels.triton import fp8_mma_gemv
if sys.argv[1] == "off":
    fp8_mma_gemv.takes = lambda *a, **k: False
eng = g.engine("llama3_8b", "quant=fp8", "kv_cache=fp8")
eng.generate([list(range(100, 1124))], g._sp(max_tokens=4, temperature=0, ignore_eos=True))
t = g._graph_kernel_table(eng, 1)
print("replay_ms", g._replay_ms(eng), "total_us", round(sum(r["us_per_replay"] for r in t), 1))
for r in t[:16]: print(json.dumps(r))'
for arm in ${ARMS:-on off}; do step "table_$arm" 90 python3 -c "$ARM" $arm; cat $OUT/table_$arm.txt | grep -v Warn | tail -18 | cut -c1-200; done
