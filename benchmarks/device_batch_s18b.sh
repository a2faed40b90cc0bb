#!/usr/bin/env bash
# The eighteenth session's second GPU batch: the block-table entries loaded one tile ahead in both
# decode kernels (atom/kernels/triton/paged_kv.py's paged_block_ids), their GPU tests, then decode
# attention over fp8 and bf16 caches from this tree and the tree before (.old), in both orders,
# and issue 21's MLA benchmark.
#   carry [".whl", ".old"]; .old = git archive c890818 atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py tests/kernels/test_mla_deepseek_triton.py tests/kernels/test_paged_attention.py -k "decode or mla"
step ab_new 90 python3 research/probes/fp8_attention_ab.py --bf16 --out $OUT/ab_new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step ab_old 90 python3 ../research/probes/fp8_attention_ab.py --bf16 --out $OUT/ab_old.json)
step ab_new2 90 python3 research/probes/fp8_attention_ab.py --bf16 --out $OUT/ab_new2.json
step mla_new 60 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new.json
python3 - <<'PY'
import json, os
o = os.environ["OUT"]
n, b, n2 = (json.load(open(f"{o}/ab_{t}.json")) for t in ("new", "old", "new2"))
for k in n:
    if isinstance(n[k], float) and isinstance(b.get(k), float):
        print(f"{k}: {b[k]} -> {n[k]} / {n2.get(k)} TB/s ({n[k] / b[k] - 1:+.1%})")

m = json.load(open(f"{o}/mla_new.json"))["mla_decode"]
print(" ".join(f"{k}:{v['of_copy']:.0%}" for k, v in m.items() if isinstance(v, dict)))
PY
