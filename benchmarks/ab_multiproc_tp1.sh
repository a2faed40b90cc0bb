#!/usr/bin/env bash
# On the GPU host: tp=1 through the multi-process executor (one worker process, its steps over
# ZMQ IPC) against the runner in the engine's own process, same build and command: bs1 decode
# (decode_small, decode_8b) and the nano-vllm workload (throughput_small). The target (issue 20):
# multiproc costs no more than uniproc. ARMS="multiproc uniproc" reverses the order. Each arm's
# "== name:" lines are printed; the JSON files land in $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
ONLY=${ONLY:-decode_small,decode_8b,throughput_small}
for arm in ${ARMS:-uniproc multiproc}; do
  PYTHONPATH=/tmp/site:$PWD timeout 270 python3 benchmarks/gpu_bench.py --only $ONLY \
      --extra parallel.executor=$arm --out $OUT/tp1_$arm.json > $OUT/tp1_$arm.log 2>&1
  echo "[$arm]"; grep "== " $OUT/tp1_$arm.log | cut -c1-400
done
python3 - "$OUT" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/tp1_{arm}.json")) for arm in ("uniproc", "multiproc"))
for name in a:
    if name == "meta" or "error" in a[name] or "error" in b.get(name, {"error": 1}):
        continue
    key = "decode_tok_s" if "decode_tok_s" in a[name] else "output_tok_s"
    same = a[name].get("first_tokens") == b[name].get("first_tokens")
    print(f"{name}: uniproc {a[name][key]} multiproc {b[name][key]} {key} "
          f"({b[name][key] / a[name][key] - 1:+.2%}); same first tokens: {same}")
PY
