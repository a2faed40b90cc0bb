set -u
source benchmarks/device_steps.sh && install_wheels
step gemv_prefetch 170 python3 benchmarks/gpu_bench.py --only gemv_prefetch --out $OUT/gemv_prefetch.json
python3 - $OUT/gemv_prefetch.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["gemv_prefetch"]
for key, row in r.items():
    if isinstance(row, dict):
        print(key, " ".join(f"{b}:{v['us']}/{v['of_copy']}" if isinstance(v, dict) else f"{b}:{v}" for b, v in row.items()))
PY
