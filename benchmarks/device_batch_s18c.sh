#!/usr/bin/env bash
# The eighteenth session's third GPU batch: MLA decode with the next tile's block-table load issued
# before this tile's offsets (run 99's adoption computed them first and lost 6% on bf16 at 256 ×
# 4k/8k, which the probe's order had gained), its GPU tests, the fp8/bf16 A/B against the tree
# before (.old) in both orders, then the GQA variants (research/probes/gqa_bt_prefetch_probe.py).
#   Last, fp8 MLA with the next tile in registers as words (research/probes/mla_fp8_prefetch_probe.py).
#   carry [".whl", ".old"]; .old = git archive c890818 atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py tests/kernels/test_mla_deepseek_triton.py
step ab_new 90 python3 research/probes/fp8_attention_ab.py --bf16 --out $OUT/ab_new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step ab_old 90 python3 ../research/probes/fp8_attention_ab.py --bf16 --out $OUT/ab_old.json)
step ab_new2 90 python3 research/probes/fp8_attention_ab.py --bf16 --out $OUT/ab_new2.json
step gqa_ahead 120 python3 research/probes/gqa_bt_prefetch_probe.py --out $OUT/gqa_ahead.json
python3 - <<'PY'
import json, os
o = os.environ["OUT"]
n, b, n2 = (json.load(open(f"{o}/ab_{t}.json")) for t in ("new", "old", "new2"))
for k in n:
    if k.startswith("mla") and isinstance(n[k], float) and isinstance(b.get(k), float):
        print(f"{k}: {b[k]} -> {n[k]} / {n2.get(k)} TB/s ({n[k] / b[k] - 1:+.1%})")
PY
cat $OUT/gqa_ahead.txt | cut -c1-300
step fp8_prefetch 200 python3 research/probes/mla_fp8_prefetch_probe.py --out $OUT/fp8_prefetch.json
cut -c1-600 $OUT/fp8_prefetch.txt
