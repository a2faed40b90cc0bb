#!/usr/bin/env bash
# The sixteenth session's first GPU batch: issue 19's decode attention with several kv heads a
# program (block-diagonal queries; research/probes/decode_kv_tiles_probe.py) against one, fp8
# and bf16 caches, after the decode attention GPU tests.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_paged_attention.py -k decode
step probe 380 python3 research/probes/decode_kv_tiles_probe.py --out $OUT/decode_kv_tiles.json
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/decode_kv_tiles.json"))
for case, r in d.items():
    if not isinstance(r, dict): continue
    ok = {k: v for k, v in r.items() if isinstance(v, dict)}
    best = sorted(ok.items(), key=lambda kv: -kv[1]["tb_s"])[:4]
    print(case, "kvp1:", r.get("kvp1_ndef_w4_stdef"), "best:", best)
PY
