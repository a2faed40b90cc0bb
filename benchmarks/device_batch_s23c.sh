#!/usr/bin/env bash
# The twenty-third session's third batch: fp8_gemv's 2..16-row kernel loading its first weight
# tile before the PDL wait (as gemv.py and fp8_mma_gemv.py). Its GPU tests, then the fp8 8B
# decode graphs' replay ms at batch 1, 2, 4, 8, 16 (qkv and o take that kernel from 2 rows),
# this tree and .old (`git archive <commit> atom conf benchmarks research pyproject.toml |
# tar -x -C .old`), order new, old, old, new. Then research/probes/decode_step_takeaway.py's
# arms, each its own process: the batch-1 fp8 graph without the W8A8 GEMVs' quantising kernels.
#   carry [".whl", ".old"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fp8_gemv.py
grep -h "FAILED\|passed\|failed" $OUT/tests.txt | head -5 | cut -c1-300
arm() { in_tree $1 step "g_$1_$2" 90 python3 -c "$GRAPHS_ARM"; }
i=0; for t in ${ORDER:-new old old new}; do i=$((i+1)); arm $t $i; done
for a in ${TAKE:-base no_quant no_norm_quant no_silu_quant}; do step "take_$a" 60 python3 research/probes/decode_step_takeaway.py $a; done
