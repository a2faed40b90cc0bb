#!/usr/bin/env bash
# The twentieth session's fifth GPU batch: issue 21's MLA benchmark once the one-wave tiles are
# kept to batches that fill at most half the SMs (run 105 lost 6-11% at 128 x 4k / 8k).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step mla 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla.json
python3 -c "
import json, os
m = json.load(open(os.environ['OUT'] + '/mla.json'))['mla_decode']
print(' '.join(f'{k}:{v[\"TBps\"]}/{v[\"read_TBps\"]}' for k, v in m.items() if isinstance(v, dict)))"
