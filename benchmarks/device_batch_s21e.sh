#!/usr/bin/env bash
# The twenty-first session's sixth GPU batch: fp8_gemv_mma_probe again, now with each
# projection's weight bytes read by a plain streaming kernel in the same harness; then the
# batch-1 fp8 decode graph kernel by kernel.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
export ATOM_COMMIT=${ATOM_COMMIT:-unknown}
step mma 200 python3 research/probes/fp8_gemv_mma_probe.py --out $OUT/mma.json
grep -E "^(qkv|o|gate_up|down) " $OUT/mma.txt | cut -c1-400
# Batch-1 decode of the 8B with fp8 weights and KV: its captured graph kernel by kernel (where
# the step's GPU time goes beside the GEMVs' plain-read limits above).
TABLE='import sys, json; sys.path.insert(0, "benchmarks"); import gpu_bench as g
eng = g.engine("llama3_8b", "quant=fp8", "kv_cache=fp8")
eng.generate([list(range(100, 1124))], g._sp(max_tokens=4, temperature=0, ignore_eos=True))
t = g._graph_kernel_table(eng, 1)
json.dump({"replay_ms": g._replay_ms(eng), "total_us": sum(r["us_per_replay"] for r in t), "kernels": t}, open(sys.argv[1], "w"), indent=1)
print("replay_ms", g._replay_ms(eng)); [print(r) for r in t[:14]]'
step table 150 python3 -c "$TABLE" $OUT/table.json
head -16 $OUT/table.txt | cut -c1-200
