#!/usr/bin/env bash
# One device command on the GPU host: install the offline wheelhouse (.whl, carried), then run each
# part under its own timeout, every result and log under $OUT (which the device tool brings back).
#
#   ATOM_COMMIT=<sha> bash benchmarks/device_batch.sh tests bench:throughput_8b,throughput_8b_fp8
#
# Parts: `tests` (the GPU-marked tests), `bench:<names>` (gpu_bench.py --only <names> at the default level),
# `script:<path>` (a benchmark script taking --out, e.g. research/probes/sm_partition_probe.py),
# `blas_ab` (this GPU's BLAS table from gemm_shape_probe.py --table, then throughput_8b with the
# table and without it, back to back on one machine: the A/B a ~1% change needs).
# PART_TIMEOUT (seconds, default 280) bounds each part, so one stuck part cannot eat the command.
set -u
: "${OUT:?the device tool sets OUT}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD ATOM_COMMIT=${ATOM_COMMIT:-unknown}
limit=${PART_TIMEOUT:-280}
for part in "$@"; do
  start=$(date +%s)
  case "$part" in
    tests)
      timeout "$limit" python3 -m pytest -q -m gpu tests/kernels tests/engine/test_compile_level3.py \
        > "$OUT/tests.txt" 2>&1
      rc=$?
      tail -n 3 "$OUT/tests.txt" ;;
    bench:*)
      names=${part#bench:}
      tag=${names//,/_}
      timeout "$limit" python3 benchmarks/gpu_bench.py --only "$names" \
        --out "$OUT/$tag.json" > "$OUT/$tag.log" 2>&1
      rc=$?
      grep '== ' "$OUT/$tag.log" | cut -c1-400 ;;
    script:*)
      path=${part#script:}
      tag=$(basename "$path" .py)
      timeout "$limit" python3 "$path" --out "$OUT/$tag.json" > "$OUT/$tag.log" 2>&1
      rc=$?
      grep '== ' "$OUT/$tag.log" | cut -c1-1500 ;;
    blas_ab)
      table=$(python3 -c "import torch; from atom.kernels.triton.blas_table import table_path
print(table_path(torch.cuda.get_device_name(0)))")
      timeout "$limit" python3 benchmarks/gemm_shape_probe.py --table > "$OUT/blas_table.log" 2>&1
      rc=$?
      cp "$table" "$OUT/" && for arm in with without; do
        [ "$arm" = without ] && mv "$table" "$table.off"
        timeout "$limit" python3 benchmarks/gpu_bench.py --only throughput_8b \
          --out "$OUT/throughput_8b_${arm}_table.json" \
          > "$OUT/throughput_8b_${arm}_table.log" 2>&1
        rc=$?
        echo "$arm table: $(grep '== ' "$OUT/throughput_8b_${arm}_table.log" | cut -c1-200)"
      done
      [ -f "$table.off" ] && mv "$table.off" "$table" ;;
    *)
      rc=2
      echo "unknown part: $part" ;;
  esac
  echo "-- $part: exit $rc after $(( $(date +%s) - start )) s"
done
