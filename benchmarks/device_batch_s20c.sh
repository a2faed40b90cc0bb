#!/usr/bin/env bash
# The twentieth session's third GPU batch: MLA decode's tiles and split counts at 16 heads again,
# now that the merge loads its splits a chunk at a time (research/probes/mla_decode_tiles.py),
# at the 1k points the timeline probe found spending 5-8 µs on programs that end late.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
step tiles 500 python3 research/probes/mla_decode_tiles.py --only h16_bf16,h16_fp8 \
  --points 64x1024,128x1024,256x1024,64x4096,256x4096,256x8192 --out $OUT/tiles.json
cat $OUT/tiles.txt | cut -c1-200
