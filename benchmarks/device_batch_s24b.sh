#!/usr/bin/env bash
# The twenty-fourth session's second GPU batch, on `git apply research/patches/h19_silu_pair_gemv.patch`:
# gate_up's W8A8 GEMV applying SiLU-and-mul and quantising it per 64-column group in its
# epilogue (fp8_mma_gemv.silu_mul_quant_gemv), down taking those groups: silu_mul_quant's
# launch gone. Its GPU tests; the MLP chain probe (the
# paired chain against today's, the pair kernel's tile sweep); then batch-1 fp8 8B decode, this
# tree and .old (`git archive <commit> atom conf benchmarks research pyproject.toml | tar -x -C
# .old`), ORDER (default new old old new); then the fp8 decode graphs' replay ms at batch 1..16,
# new and old.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fp8_mma_gemv.py \
  tests/quant/test_fp8_gpu.py -k "mma or gated or fused or silu or dispatched"
grep -h "FAILED\|passed\|failed\|Error" $OUT/tests.txt | head -8 | cut -c1-300
step chain 150 python3 research/probes/fp8_mlp_chain.py --quick --out $OUT/chain.json
WEIGHTS=fp8 decode_ab
grep -h "^arm" $OUT/d_*.txt
[ -n "${NO_GRAPHS:-}" ] || for t in new old; do in_tree $t step "g_$t" 90 python3 -c "$GRAPHS_ARM"; done
