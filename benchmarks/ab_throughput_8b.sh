#!/usr/bin/env bash
# On the GPU host: the 8B 1000 x 1k/1k run of an older commit (its tree in .old, as
# benchmarks/ab_decode_nanovllm.sh says) against this tree, back to back (ARMS="new old" reverses
# the order: the card at its power cap runs a second run slightly differently).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
ROOT=$PWD
for arm in ${ARMS:-old new}; do
  dir=$ROOT; [ $arm = old ] && dir=$ROOT/.old
  (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 280 python3 benchmarks/gpu_bench.py --only throughput_8b --extra runtime.level=2 --out $OUT/t8b_$arm.json > $OUT/t8b_$arm.log 2>&1; echo "[$arm]"; grep "== " $OUT/t8b_$arm.log | cut -c1-400)
done
