#!/usr/bin/env bash
# The twentieth session's fourth GPU batch: MLA decode at 16 heads bf16 with one program an SM,
# three stages deep, where the batch fits one wave (tile_defaults' one_wave). Its GPU tests, the
# tiles probe at the points run 104 did not cover, then issue 21's MLA benchmark from this tree
# and from .old (`git archive ad1410d atom conf benchmarks pyproject.toml | tar -x -C .old`) in the
# order new, old, new.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 200 python3 -m pytest -q -m gpu tests/kernels/test_mla_decode.py
step tiles 200 python3 research/probes/mla_decode_tiles.py --only h16_bf16 \
  --points 1x4096,16x4096,32x1024,128x4096,64x8192,128x8192 --out $OUT/tiles.json
cut -c1-200 $OUT/tiles.txt
step mla_new 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step mla_old 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_old.json)
step mla_new2 90 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new2.json
python3 -c "
import json, os
o = os.environ['OUT']
n, b, n2 = (json.load(open(f'{o}/mla_{t}.json'))['mla_decode'] for t in ('new', 'old', 'new2'))
for k, v in b.items():
    if isinstance(v, dict) and k.startswith('h16_bf16'):
        print(f'{k}: {v[\"TBps\"]} -> {n[k][\"TBps\"]} / {n2[k][\"TBps\"]} (read {v[\"read_TBps\"]})')"
