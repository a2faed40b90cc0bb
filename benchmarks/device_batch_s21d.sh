#!/usr/bin/env bash
# The twenty-first session's fifth GPU batch: the one-row W8A8 wgmma GEMV probe (as s21c);
# then MLA decode with each sequence's splits merged by its last split (the merge launch
# gone): its GPU tests, and issue 21's benchmark with both merges at every point.
#   carry [".whl"]
# Ran at 4c7e63e (run 110). The merge by the last split was slower at most points and was
# reverted: gpu_bench's mla_decode no longer times the two merges.
set -u
source benchmarks/device_steps.sh && install_wheels
export ATOM_COMMIT=${ATOM_COMMIT:-unknown}
step mma 200 python3 research/probes/fp8_gemv_mma_probe.py --out $OUT/mma.json
grep -E "^(qkv|o|gate_up|down) " $OUT/mma.txt | cut -c1-400
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 130 $T tests/kernels/test_mla_decode.py
grep -h "FAILED\|Error" $OUT/tests.txt | head -8 | cut -c1-300
step mla 230 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla.json
python3 -c "
import json, os
m = json.load(open(os.environ['OUT'] + '/mla.json'))['mla_decode']
print(' '.join(f'{k}:{v[\"us\"]}/{v[\"merge_launch_us\"]}us,{v[\"TBps\"]}' for k, v in m.items() if isinstance(v, dict)))"
