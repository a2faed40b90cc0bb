#!/usr/bin/env bash
# The eighteenth session's first GPU call (run 98, written in the seventeenth): the
# MLA decode GPU tests that run 97 did not reach after the bf16 16-row tile change, in a step with
# room for cold compiles, then MLA decode with the block-table entries loaded one tile ahead
# (research/probes/mla_bt_prefetch_probe.py at e48eadd: atom's kernel and the variant, outputs
# compared; the kernel has it since, and the probe became gqa_bt_prefetch_probe.py).
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py tests/kernels/test_mla_deepseek_triton.py
step bt_prefetch 150 python3 research/probes/mla_bt_prefetch_probe.py --out $OUT/bt_prefetch.json
cat $OUT/bt_prefetch.txt | cut -c1-300
