#!/bin/bash
# A Hydra sweep over an engine setting and the load: atom.bench launches one server per KV dtype.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-500} python3 -m atom.bench -m kv_cache=bf16,fp8 model=qwen3_0_6b load=dummy \
  bench.launch_server=true bench.tokenizer=bytes bench.random_input_len=1024 bench.random_output_len=128 \
  bench.max_concurrency=16,64,256 bench.prompts_per_concurrency=4 bench.disable_tqdm=true \
  hydra.sweep.dir=/tmp/sweep > $OUT/bench.log 2>&1
echo "bench rc=$? after $(( $(date +%s) - t0 )) s"
grep -E "Maximum request|Failed|Output token|Mean TPOT|Median TTFT|WARNING|Error|error" $OUT/bench.log | head -60
python3 -m atom.benchmarks.plots /tmp/sweep --out $OUT
cp /tmp/sweep/0/server.log $OUT/server_bf16.log 2>/dev/null; cp /tmp/sweep/3/server.log $OUT/server_fp8.log 2>/dev/null
tar czf $OUT/sweep.tgz -C /tmp/sweep .
ls $OUT
