#!/bin/bash
# Serving-benchmark frontier against atom on the GPU (qwen3_0_6b shape, dummy weights).
# MODEL, EXTRA (more server overrides), ISL/OSL, CONCS, PPC choose the run; issue 21's reduced-depth
# R1 (3 dense + 2 MoE layers at real widths) through the real server:
#   MODEL=deepseek_r1 EXTRA="model.hf_config.num_hidden_layers=5" CONCS=1,64,256 bash benchmarks/serving_frontier_gpu.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
MODEL=${MODEL:-qwen3_0_6b}
python3 -m atom.entrypoints.openai_server --host 127.0.0.1 --server-port 8000 model=$MODEL load=dummy ${EXTRA:-} \
  runtime.enable_log_stats=false server.disable_uvicorn_access_log=true > $OUT/server.log 2>&1 &
SRV=$!
t0=$(date +%s)
for i in $(seq 1 480); do
  curl -sf 127.0.0.1:8000/health >/dev/null && break
  kill -0 $SRV 2>/dev/null || { echo "server died"; tail -50 $OUT/server.log; exit 1; }
  sleep 0.5
done
echo "server ready after $(( $(date +%s) - t0 )) s"
timeout ${BENCH_TIMEOUT:-360} python3 -m atom.bench -m model=$MODEL load=dummy bench.tokenizer=bytes \
  bench.base_url=http://127.0.0.1:8000 bench.random_input_len=${ISL:-1024} bench.random_output_len=${OSL:-128} \
  bench.max_concurrency=${CONCS:-1,16,64,256} bench.prompts_per_concurrency=${PPC:-4} bench.disable_tqdm=true \
  bench.label=atom:$MODEL:dummy hydra.sweep.dir=/tmp/sweep > $OUT/bench.log 2>&1
echo "bench rc=$?"
grep -E "Maximum request|Successful|Failed|Output token|Mean TPOT|Median TTFT|merge factor|WARNING" $OUT/bench.log
python3 -m atom.benchmarks.plots /tmp/sweep --out $OUT
tar czf $OUT/sweep.tgz -C /tmp/sweep .
ls $OUT
kill $SRV; wait $SRV 2>/dev/null
