# Sourced by the device batch scripts (benchmarks/device_batch_s*.sh), from the repository root
# on the GPU host: the import path over the wheels in /tmp/site, `install_wheels` (the carried
# .whl/ into /tmp/site; a warm machine already has them), and `step NAME SECS CMD...`, which runs
# CMD under its own timeout with its output in $OUT/NAME.txt and prints one line: its exit
# status, its seconds and the output's last line, so one part that hangs or fails never costs
# the parts after it.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
install_wheels() { python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null; }
step() { local name=$1 secs=$2; shift 2; local t0=$(date +%s)
  timeout $secs "$@" > $OUT/$name.txt 2>&1
  echo "[$name rc=$? $(( $(date +%s) - t0 ))s] $(tail -1 $OUT/$name.txt | cut -c1-300)"; }
# `proof3 NAME DIR SECS`: issue 21's proof 3 (reduced-depth R1, 3 dense + 2 MoE layers at real
# widths, quant=fp8_block kv_cache=fp8, through the server at concurrency 1 / 64 / 256) from the
# tree at DIR, its logs under $OUT/NAME and $OUT/r1_NAME.txt, the figures printed; the plots and
# the sweep's archive dropped (a call brings back only a few files). P3_CONCS and P3_PPC change
# the concurrency levels and the prompts per concurrency slot.
proof3() { local name=$1 dir=$2 secs=$3; mkdir -p $OUT/$name
  (cd $dir && OUT=$OUT/$name MODEL=deepseek_r1 CONCS=${P3_CONCS:-1,64,256} PPC=${P3_PPC:-2} \
    EXTRA="model.hf_config.num_hidden_layers=5 quant=fp8_block kv_cache=fp8" \
    timeout $secs bash benchmarks/serving_frontier_gpu.sh > $OUT/r1_$name.txt 2>&1)
  echo "[$name]"; grep -E "ready|Output token|Mean TPOT|Median TTFT|Failed|died" $OUT/r1_$name.txt | cut -c1-200
  rm -f $OUT/$name/*.png $OUT/$name/sweep.tgz $OUT/$name/index.html; }
