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
