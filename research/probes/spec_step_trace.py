"""Where a speculative step's time goes at batch 1: EAGLE-3 on Llama-3.1-8B (dummy weights, the
published head's shape, every draft rejected) against plain decoding, each engine step under
the torch profiler.

Why: eagle3_bench measured 98.5 tok/s at acceptance length 1.0 against plain's 241 (k = 7):
a step of 10.2 ms where the bytes the target's verify and seven draft forwards read predict
~6. This splits the step into GPU busy time per kernel family and the host's share (GPU idle),
and counts the host syncs (aten::_local_scalar_dense, cudaStreamSynchronize,
cudaMemcpyAsync device-to-host) per step.

    python research/probes/spec_step_trace.py [--k 7] [--steps 40] [--trace DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from eagle3_bench import write_head  # noqa: E402
from gpu_bench import profiled_steps  # noqa: E402
from spec_bench_kit import dummy_engine  # noqa: E402

from atom import SamplingParams  # noqa: E402

SYNCS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
         "cudaEventSynchronize", "aten::item", "cudaMemcpyAsync")


def trace(eng, steps: int, trace_path: str | None) -> dict:
    vocab = eng.core.executor.runner.vocab_size
    eng.add_request([[(7 * i) % (vocab - 200) + 100 for i in range(512)]],
                    [SamplingParams(temperature=0.0, max_tokens=steps * 9 + 64, ignore_eos=True)])
    for _ in range(8):
        eng.step()
    prof, wall_us, busy, _, fam = profiled_steps(eng, steps, cpu=True)
    if trace_path:
        prof.export_chrome_trace(trace_path)
    cpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    syncs = {n: sum(1 for e in cpu if e.name == n) / steps for n in SYNCS}
    launches = sum(1 for e in cpu if e.name in ("cudaLaunchKernel", "cuLaunchKernel",
                                               "cudaLaunchKernelExC", "cuLaunchKernelEx")) / steps
    graphs = sum(1 for e in cpu if e.name == "cudaGraphLaunch") / steps
    top_cpu: dict[str, float] = {}
    for e in cpu:
        top_cpu[e.name] = top_cpu.get(e.name, 0.0) + e.self_cpu_time_total
    return {"wall_ms_per_step": round(wall_us / steps / 1e3, 3),
            "gpu_busy_ms_per_step": round(busy / steps / 1e3, 3),
            "gpu_idle_fraction": round(1 - busy / wall_us, 3),
            "family_ms_per_step": {k: round(v / steps / 1e3, 3)
                                   for k, v in sorted(fam.items(), key=lambda kv: -kv[1])[:12]},
            "per_step": {"graph_launches": graphs, "kernel_launches": launches,
                         **{k: round(v, 2) for k, v in syncs.items()}},
            "top_cpu_self_ms_per_step": {k[:80]: round(v / steps / 1e3, 3) for k, v in
                                         sorted(top_cpu.items(), key=lambda kv: -kv[1])[:15]}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--trace", default=None, help="a folder for the Chrome traces")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        head = write_head(Path(tmp))
        for name, spec in (("plain", []), (f"eagle3_k{args.k}_len1", [
                "specdecode=eagle3", f"specdecode.draft_model={head}",
                f"specdecode.num_speculative_tokens={args.k}", "specdecode.acceptance_length=1.0"])):
            eng = dummy_engine(["model=llama3_8b", *spec], [1])
            path = f"{args.trace}/{name}.json" if args.trace else None
            out[name] = trace(eng, args.steps, path)
            print(f"== {name}: {json.dumps(out[name])}", flush=True)
            eng.shutdown()
            del eng
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
