#!/usr/bin/env bash
# The twentieth session's first GPU batch: the MLA decode merge that loads a chunk of splits
# at once. Its GPU tests, then issue 21's MLA benchmark from this tree and from .old (the tree
# before: `git archive 8467e83 atom conf benchmarks pyproject.toml | tar -x -C .old`) in the
# order new, old, new; what a short call's fixed cost is made of (research/probes/
# mla_decode_fixed_cost.py), then the phases probe (the chunked merge against one tile of every
# split).
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 200 python3 -m pytest -q -m gpu tests/kernels/test_mla_decode.py
summary() { python3 -c "
import json, sys
m = json.load(open(sys.argv[1]))['mla_decode']
print(' '.join(f'{k}:{v[\"TBps\"]}' for k, v in m.items() if isinstance(v, dict)))" $1; }
step mla_new 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step mla_old 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_old.json)
step mla_new2 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new2.json
for f in mla_new mla_old mla_new2; do echo "== $f"; summary $OUT/$f.json; done
step fixed 150 python3 research/probes/mla_decode_fixed_cost.py --out $OUT/fixed.json
cut -c1-330 $OUT/fixed.txt
step phases 200 python3 research/probes/mla_decode_phases.py --out $OUT/phases.json
cut -c1-600 $OUT/phases.txt
