#!/usr/bin/env bash
# The eighteenth session's fourth GPU batch: where an MLA decode call's time goes at short
# contexts (research/probes/mla_decode_phases.py: each kernel's device time, the call from a CUDA
# graph, and a merge that loads every split of a head at once), then issue 21's MLA benchmark.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step phases 200 python3 research/probes/mla_decode_phases.py --out $OUT/phases.json
cut -c1-400 $OUT/phases.txt
step mla 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla.json
python3 -c "
import json, os
m = json.load(open(os.environ['OUT'] + '/mla.json'))['mla_decode']
print(' '.join(f'{k}:{v[\"TBps\"]}/{v[\"of_copy\"]:.0%}' for k, v in m.items() if isinstance(v, dict)))"
