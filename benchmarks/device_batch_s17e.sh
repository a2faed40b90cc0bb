#!/usr/bin/env bash
# The seventeenth session's fifth GPU batch: MLA decode with the latent's first L dims in two
# halves (three independent score dots, two output accumulators), its GPU tests, then issue 21's
# MLA benchmark from this tree and from the tree before (.old) and the 16-head tiles.
#   carry [".whl", ".old"]; .old = git archive f000910 atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py tests/kernels/test_mla_deepseek_triton.py
step mla_new 45 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step mla_old 45 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_old.json)
step tiles 80 python3 research/probes/mla_decode_tiles.py --only h16_fp8,h16_bf16 --out $OUT/mla_tiles.json
python3 - <<'PY'
import json, os
o = os.environ["OUT"]
n, b = (json.load(open(f"{o}/mla_{t}.json")) for t in ("new", "old"))
n, b = n.get("mla_decode", n), b.get("mla_decode", b)
for k in n:
    if isinstance(n[k], dict) and isinstance(b.get(k), dict):
        print(f"{k}: {b[k]['TBps']} -> {n[k]['TBps']} TB/s ({n[k]['of_copy']:.0%} of copy)")
PY
grep -h "default" $OUT/tiles.txt | cut -c1-200
