#!/usr/bin/env bash
# The seventeenth session's third GPU batch: issue 19's 8B 1000 x 1k/1k with fp8 weights and KV in
# the other order (the tree before, .old, first), then the fp8 run's energy per unit of work with
# the pinned e4m3 conversion (research/probes/energy_probe.py --fp8; run 89 is the tree before's).
#   carry [".whl", ".old"]; .old = git archive dae49ac atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step old 175 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/old.json)
step new 175 python3 benchmarks/gpu_bench.py --only throughput_8b_fp8w --out $OUT/new.json
step energy_fp8 150 python3 research/probes/energy_probe.py --fp8 --out $OUT/energy_fp8.json
grep -h "== " $OUT/old.txt $OUT/new.txt | cut -c1-200
python3 -c "
import json, os
for n in ('old', 'new'):
    d = json.load(open(os.environ['OUT'] + f'/{n}.json')); r = d.get('throughput_8b_fp8w', d)
    print(n, r['output_tok_s'], r['gpu'])"
grep -h "ceiling\|attention" $OUT/energy_fp8.txt | cut -c1-300
