#!/usr/bin/env bash
# The twenty-first session's first GPU batch: the one-row GEMV's L2 prefetch of its next tiles,
# the first before its PDL wait (l2_prefetch.py). Its GPU tests and the GEMV ones;
# gemv_prefetch (each depth, per 8B projection and per decoder layer's chain of four, fp8 and
# bf16); batch-1 decode of the 8B, fp8 weights + KV and bf16, at depths 2, 0 and 4
# (research/probes/decode_prefetch_ab.py).
#   carry [".whl"]
# Ran at 520e77e (run 107): every prefetch depth was slower than none, in the GEMVs and the
# layer chains; the prefetch was reverted after runs 108-109, so the files it names are gone.
set -u
source benchmarks/device_steps.sh && install_wheels
export ATOM_COMMIT=${ATOM_COMMIT:-unknown}
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 150 $T tests/kernels/test_l2_prefetch.py tests/kernels/test_gemv.py tests/kernels/test_fp8_gemv.py
grep -h "FAILED\|Error" $OUT/tests.txt | head -8 | cut -c1-300
step gemv_prefetch 170 python3 benchmarks/gpu_bench.py --only gemv_prefetch --out $OUT/gemv_prefetch.json
python3 - $OUT/gemv_prefetch.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["gemv_prefetch"]
for key, row in r.items():
    if isinstance(row, dict):
        print(key, " ".join(f"{b}:{v['us']}/{v['of_copy']}" if isinstance(v, dict) else f"{b}:{v}" for b, v in row.items()))
PY
step decode 300 python3 research/probes/decode_prefetch_ab.py --arms fp8:2,fp8:0,fp8:4,bf16:2,bf16:0 --out $OUT/decode_ab.json
grep -E "^fp8|^bf16" $OUT/decode.txt
