#!/usr/bin/env bash
# The twenty-first session's first GPU batch: the one-row GEMV's L2 prefetch before its PDL wait
# (l2_prefetch.py). Its GPU tests and the GEMV ones; gemv_prefetch (each budget, per 8B
# projection and per decoder layer's chain of four, fp8 and bf16); batch-1 decode of the 8B,
# fp8 weights + KV, with the default budget and none (research/probes/decode_prefetch_ab.py).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
export ATOM_COMMIT=${ATOM_COMMIT:-unknown}
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 150 $T tests/kernels/test_l2_prefetch.py tests/kernels/test_gemv.py tests/kernels/test_fp8_gemv.py
grep -h "FAILED\|Error" $OUT/tests.txt | head -8 | cut -c1-300
step gemv_prefetch 150 python3 benchmarks/gpu_bench.py --only gemv_prefetch --out $OUT/gemv_prefetch.json
python3 - $OUT/gemv_prefetch.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["gemv_prefetch"]
for key, row in r.items():
    if isinstance(row, dict):
        print(key, " ".join(f"{b}:{v['us']}/{v['of_copy']}" if isinstance(v, dict) else f"{b}:{v}" for b, v in row.items()))
PY
step decode 260 python3 research/probes/decode_prefetch_ab.py --budgets 16384,0,65536 --out $OUT/decode_ab.json
grep -E "^fp8|^bf16" $OUT/decode.txt
