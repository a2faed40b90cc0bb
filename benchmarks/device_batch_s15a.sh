#!/usr/bin/env bash
# The fifteenth session's first GPU batch: block-scaled fp8 weights at 2..16 rows through the
# weight-only dot (fp8_gemv's HAS_BLOCK_SCALE), against the tree before it (.old, a30ac53), in one
# command: the fp8 GEMV/block GPU tests, gpu_bench's block_decode rows (the dot beside
# fp8_block_gemm at M = 2..16 on R1's shapes), then issue 21's proof 3 at concurrency 1 / 4 / 16
# (the decode batches the change serves) in both trees.
#   git archive a30ac53 atom conf benchmarks pyproject.toml | tar -x -C .old ; carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
ROOT=$PWD
ln -sfn $ROOT/.whl $ROOT/.old/.whl  # serving_frontier_gpu.sh installs from ./.whl
T="python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120"
step tests 200 $T tests/kernels/test_fp8_gemv.py tests/kernels/test_fp8_block_gemm.py tests/quant/test_fp8_gpu.py tests/kernels/test_sm90_compile.py
grep -h "FAILED\|Error\|passed\|failed" $OUT/tests.txt | head -8 | cut -c1-300
step block_decode 150 python3 benchmarks/gpu_bench.py --only fp8_block_decode --out $OUT/block_decode.json
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d=d.get('fp8_block_decode',d); print(d.get('total_us')); [print(k, {l: v for l, v in r.items() if not l.startswith('dot_n')}) for k, r in d.items() if k.endswith(('m2','m16'))]" $OUT/block_decode.json 2>&1 | cut -c1-300
export P3_CONCS=1,4,16 P3_PPC=4
proof3 new $ROOT 170
proof3 old $ROOT/.old 170
