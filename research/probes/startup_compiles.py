"""Which Triton kernel variants a cold start compiles, when, and for how long.

Why: on a fresh H200 (empty Triton cache) the Qwen3-0.6B start to ready took 26.0 s against 15.2
warm (run 38); the ~11 s between them is Triton compiling kernels during the profiling forward and
the CUDA-graph capture. This builds the engine once in this process with an empty cache
(TRITON_CACHE_DIR pointed at a new directory) and times every compile, with the kernel's name
and what it was specialised on, so variants that differ only by a specialisation show up.

    python research/probes/startup_compiles.py --out compiles.json [hydra overrides...]
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
import logging
import os
import tempfile
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import report


def _record(compiles: list[dict[str, Any]], t0: float) -> None:
    """Wraps `triton.compiler.compile` (which JITFunction imports when it first launches, so
    this must run before any kernel does) so each compile appends its kernel, what it was
    specialised on and its duration."""
    import triton.compiler

    plain = triton.compiler.compile

    def timed(src, *args, **kwargs):
        start = time.perf_counter()
        out = plain(src, *args, **kwargs)
        fn = getattr(src, "fn", None)
        compiles.append({"kernel": getattr(fn, "__name__", type(src).__name__),
                         "at_s": round(start - t0, 2), "s": round(time.perf_counter() - start, 3),
                         "constants": _named(fn, getattr(src, "constants", {})),
                         "attrs": _named(fn, getattr(src, "attrs", {}))})
        return out
    triton.compiler.compile = timed


def _named(fn: Any, by_path: dict) -> str:
    """A specialisation dict keyed by argument paths ((index,), ...) as argument names."""
    names = getattr(fn, "arg_names", [])
    out = {(names[k[0]] if isinstance(k, tuple) and len(k) == 1 and k[0] < len(names) else str(k)): v
           for k, v in by_path.items()}
    return repr(out)[:400]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--model", default="qwen3_0_6b")
    ap.add_argument("overrides", nargs="*", default=[])
    args = ap.parse_args()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_cold_")
    t0 = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d ms %(name)s: %(message)s")
    compiles: list[dict[str, Any]] = []
    _record(compiles, t0)
    from atom.config.compose import compose
    from atom.llm_engine import LLMEngine

    cfg = compose([f"model={args.model}", "load=dummy", *args.overrides])
    cfg.load.progress_bar = False
    LLMEngine.from_config(cfg)
    total = time.perf_counter() - t0
    by_kernel: dict[str, list[float]] = defaultdict(list)
    for c in compiles:
        by_kernel[c["kernel"]].append(c["s"])
    res = {"commit": os.environ.get("ATOM_COMMIT", "unknown"), "model": args.model,
           "overrides": args.overrides, "start_to_ready_s": round(total, 2),
           "compiles": len(compiles), "compile_s": round(sum(c["s"] for c in compiles), 2),
           "by_kernel": {k: {"n": len(v), "s": round(sum(v), 2)} for k, v in
                         sorted(by_kernel.items(), key=lambda kv: -sum(kv[1]))},
           "each": compiles}
    report("startup_compiles", res, args.out)


if __name__ == "__main__":
    main()
