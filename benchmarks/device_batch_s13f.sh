#!/usr/bin/env bash
# The thirteenth session's last GPU batch, after h20dp (DP attention) merged beside h22v and
# h20bt: every one-GPU engine and speculative-decoding test (the runner's launch was split).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 \
    --durations=5 tests/engine tests/spec_decode > $OUT/gpu_engine.txt 2>&1
echo "[gpu_engine rc=$?] $(tail -1 $OUT/gpu_engine.txt)"
grep -h "FAILED\|Error" $OUT/gpu_engine.txt | head -12 | cut -c1-300
