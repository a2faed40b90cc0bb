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
# `in_tree old|new CMD...`: CMD in .old (the tree before a change, `git archive <commit> atom
# conf benchmarks research pyproject.toml | tar -x -C .old`) or in this tree.
in_tree() { local t=$1; shift
  if [ $t = old ]; then (cd .old && export PYTHONPATH=/tmp/site:$PWD && "$@"); else "$@"; fi; }
# `decode_ab`: batch-1 Llama-3.1-8B decode (1024 in, 256 out) for each of WEIGHTS (fp8 = fp8
# weights + KV, bf16) in the trees of ORDER, each arm its own process: tok/s, replay ms, tokens.
DECODE_ARM='import sys; sys.path.insert(0, "benchmarks"); import gpu_bench as g
extra = ("quant=fp8", "kv_cache=fp8") if sys.argv[1] == "fp8" else ()
r = g.bench_decode("llama3_8b", 1024, 256, extra)
print("arm", sys.argv[1], r["decode_tok_s"], r["graph_replay_ms_bs1"], r["first_tokens"][:8])'
decode_ab() { local w t i
  for w in ${WEIGHTS:-fp8 bf16}; do i=0; for t in ${ORDER:-new old old new}; do i=$((i+1))
    in_tree $t step "d_${t}_${w}_$i" 70 python3 -c "$DECODE_ARM" $w; done; done; }
# GRAPHS_ARM: the 8B fp8 decode graphs' replay ms at batch 1, 2, 4, 8 and 16 (`python3 -c`), one
# engine a process; s23c and s24b run it in each tree.
GRAPHS_ARM='import sys, torch; sys.path.insert(0, "benchmarks"); import gpu_bench as g
eng = g.engine("llama3_8b", "quant=fp8", "kv_cache=fp8")
eng.generate([list(range(100, 1124))] * 16, g._sp(max_tokens=8, temperature=0, ignore_eos=True))
graphs = eng.core.executor.runner.graphs.graphs
out = {}
for bs in (1, 2, 4, 8, 16):
    if bs in graphs:
        graph = graphs[bs][0]
        for _ in range(5): graph.replay()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(50): graph.replay()
        b.record(); torch.cuda.synchronize(); out[bs] = round(a.elapsed_time(b) / 50, 4)
print("arm", out)'
