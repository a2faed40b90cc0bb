#!/usr/bin/env bash
# The fourteenth session's fifth GPU batch, in two calls on one warm machine (SmolLM2's GGUF is
# over one call's 64 MiB with the wheels; NOTES "Device budget"):
#   A: carry [".whl", ".smol/part_aa"]:  bash benchmarks/device_batch_s14e.sh a
#   B: carry [".smol/part_ab", ".smol/part_ac", ".smol/GPL-3"]:  bash benchmarks/device_batch_s14e.sh b
# A installs, stages the first part and runs the online quantizer's GPU tests (GPU bytes = CPU
# bytes); B joins the file and runs fp8_quality_smollm2 (the passage and GPL-3's first 2048
# tokens, quant=fp8 against the float run).
set -u
source benchmarks/device_steps.sh
if [ "$1" = a ]; then
  install_wheels
  mkdir -p /tmp/smol && cp .smol/part_aa /tmp/smol/
  step tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/quant/test_fp8_quantizer.py
else
  cat /tmp/smol/part_aa .smol/part_ab .smol/part_ac > /tmp/smol.gguf && sha256sum /tmp/smol.gguf | cut -c1-16
  [ -f /usr/share/common-licenses/GPL-3 ] || { mkdir -p /usr/share/common-licenses && cp .smol/GPL-3 /usr/share/common-licenses/; }
  SMOLLM2_GGUF=/tmp/smol.gguf step quality 240 python3 benchmarks/gpu_bench.py --only fp8_quality_smollm2 --out $OUT/quality.json
  grep -h "== " $OUT/quality.txt | cut -c1-1500
fi
