#!/usr/bin/env bash
# The seventeenth session's first GPU batch: the e4m3 tiles converted by an impure inline asm
# (atom/kernels/triton/e4m3.py: one conversion a latent element, one f16 round trip through shared
# memory), its GPU tests, then GQA and MLA decode attention over fp8 caches from this tree and from
# the tree before (.old), the MLA benchmark and the fp8 MLA tile choices.
#   carry [".whl", ".old"]; .old = git archive dae49ac atom conf benchmarks pyproject.toml
set -u
source benchmarks/device_steps.sh && install_wheels
step tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_mla_decode.py tests/kernels/test_paged_attention.py -k "decode or mla"
step ab_new 90 python3 research/probes/fp8_attention_ab.py --out $OUT/ab_new.json
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step ab_old 90 python3 ../research/probes/fp8_attention_ab.py)
step mla_new 120 python3 benchmarks/gpu_bench.py --only mla_decode --out $OUT/mla_new.json
step tiles 130 python3 research/probes/mla_decode_tiles.py --only h16_fp8 --out $OUT/mla_tiles.json
paste $OUT/ab_new.txt $OUT/ab_old.txt | cut -c1-160
grep -h "default\|best" $OUT/tiles.txt | cut -c1-200
grep -h "mla_decode h" $OUT/mla_new.txt | cut -c1-160
