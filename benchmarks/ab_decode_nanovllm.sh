#!/usr/bin/env bash
# On the GPU host: GPU tests, the default start, and an A/B of an older commit (its tree in .old:
#   git archive <commit> atom conf benchmarks pyproject.toml | tar -x -C .old   (all of benchmarks/: gpu_bench imports its siblings)
# then carry [".whl", ".old"]) against this tree:
# bs1 decode 8B and the nano-vllm workload (throughput_small), both arms at level 2.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
ROOT=$PWD
PYTHONPATH=/tmp/site:$ROOT timeout 200 python3 -m pytest -q -m gpu tests/kernels tests/engine > $OUT/tests.txt 2>&1; tail -2 $OUT/tests.txt
PYTHONPATH=/tmp/site:$ROOT timeout 200 python3 benchmarks/gpu_bench.py --only startup --out $OUT/startup.json > $OUT/startup.log 2>&1; grep "== " $OUT/startup.log | cut -c1-700
for arm in old new; do
  dir=$ROOT; [ $arm = old ] && dir=$ROOT/.old
  (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 170 python3 benchmarks/gpu_bench.py --only decode_8b,throughput_small --extra runtime.level=2 --out $OUT/ab_$arm.json > $OUT/ab_$arm.log 2>&1; echo "[$arm]"; grep "== " $OUT/ab_$arm.log | cut -c1-260)
done
