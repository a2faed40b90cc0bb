#!/usr/bin/env bash
# The twentieth session's second GPU batch: issue 21's MLA benchmark with its new peer column
# (the same bytes read by one plain launch, stream_read.py), then where a short MLA decode
# call's fixed cost goes (research/probes/mla_decode_timeline.py: each program's timeline).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step mla 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla.json
python3 -c "
import json, os
m = json.load(open(os.environ['OUT'] + '/mla.json'))['mla_decode']
print(' '.join(f'{k}:{v[\"TBps\"]}/{v[\"read_TBps\"]}' for k, v in m.items() if isinstance(v, dict)))"
step timeline 150 python3 research/probes/mla_decode_timeline.py --out $OUT/timeline.json
cut -c1-700 $OUT/timeline.txt
