"""Where an engine start goes, phase by phase, without a profiler's inflation.

Runs `LLMEngine.from_config` for the default config (Qwen3-0.6B shape, dummy weights) in fresh
interpreters — cold (new Triton and atom caches) then warm (the same caches) — and prints seconds since
the interpreter was launched at each phase: imports, CUDA init, HF config, model build, the
profiling forward, KV allocation, each graph size's warm-up and capture, ready, exit. Phases are
timed by wrapping the functions that do them (the product is not edited), so the figures are
the product's own.

    python research/probes/startup_timeline.py [--extra runtime.level=2 ...] [--out t.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r'''
import json, os, sys, time
T0 = float(os.environ["TIMELINE_T0"])
events = []
def mark(name):
    events.append((name, round(time.time() - T0, 3)))
mark("interpreter up")
import torch; mark("import torch")
torch.cuda.init(); torch.zeros(1, device="cuda"); mark("CUDA init")
from atom.config.compose import compose
from atom.llm_engine import LLMEngine
mark("import atom")
import atom.runner.model_runner as mr
import atom.runner.cuda_graphs as cg

def wrap(mod, name, label):
    fn = getattr(mod, name)
    def inner(*a, **k):
        mark(label + " start")
        out = fn(*a, **k)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        mark(label + " end")
        return out
    setattr(mod, name, inner)
wrap(mr, "load_hf_config", "hf config")
wrap(mr, "build_model", "model build")
wrap(mr, "compile_forward", "compile_forward")
wrap(mr, "allocate", "kv allocate")
wrap(mr.ModelRunner, "_profile_forward", "profile forward")
wrap(mr.ModelRunner, "_capture_graphs", "graphs")

sizes = {}
orig_graph = torch.cuda.graph
class timed_graph(orig_graph):
    def __enter__(self):
        torch.cuda.synchronize(); self._t = time.time(); return super().__enter__()
    def __exit__(self, *a):
        r = super().__exit__(*a); torch.cuda.synchronize()
        sizes.setdefault("capture_s", []).append(round(time.time() - self._t, 4)); return r
torch.cuda.graph = timed_graph

c = compose(["model=qwen3_0_6b", "load=dummy", *json.loads(os.environ["TIMELINE_EXTRA"])])
c.load.progress_bar = False
e = LLMEngine.from_config(c)
mark("READY")
mark("transformers imported: %s" % ("transformers" in sys.modules))
cap = sizes.get("capture_s", [])
print(json.dumps({"events": events, "captures": len(cap), "capture_sum_s": round(sum(cap), 3),
                  "capture_s": cap}), flush=True)
'''


def run(extra: list[str], cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TRITON_CACHE_DIR=cache, ATOM_CACHE_DIR=cache + "_atom",
               TIMELINE_EXTRA=json.dumps(extra), TIMELINE_T0=repr(time.time()))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env)
    exit_s = round(time.time() - t0, 3)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": p.stderr[-3000:]}
    out = json.loads(lines[-1])
    out["events"].append(("process exited", exit_s))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra", nargs="*", default=[])
    ap.add_argument("--out")
    a = ap.parse_args()
    run(a.extra, tempfile.mkdtemp(prefix="triton_prime_"))  # writes bytecode caches
    cache = tempfile.mkdtemp(prefix="triton_timeline_")
    res = {"extra": a.extra, "cold": run(a.extra, cache), "warm": run(a.extra, cache)}
    for label in ("cold", "warm"):
        r = res[label]
        print(f"== {label}: captures {r.get('captures')} in {r.get('capture_sum_s')} s")
        for name, t in r.get("events", []):
            print(f"   {t:8.3f}  {name}")
        if "error" in r:
            print(r["error"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
