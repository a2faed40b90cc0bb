"""Batch-1 decode of the 8B with and without the GEMVs' L2 prefetch (gemv.PREFETCH_TILES), in one
process: decode tok/s, the captured graph's replay time, and the first greedy tokens (a
prefetch moves no value, so the arms must agree); with --table, the fp8 graph kernel by kernel.

Why: the one-row fp8 GEMV's fixed cost (~2.6 µs a launch, 128 launches a step) and its 73–86%
streaming rate are the gap between batch-1 fp8 decode and issue 19's 85% of the byte limit;
this says how much of it the prefetch takes back in the real step, not only in
gemv_prefetch's chains.

    python research/probes/decode_prefetch_ab.py --arms fp8:2,fp8:0,bf16:2,bf16:0 [--table] --out ab.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_bench  # noqa: E402
from atom.kernels.triton import gemv  # noqa: E402

FP8 = ("quant=fp8", "kv_cache=fp8")


def kernel_table(extra: tuple[str, ...]) -> dict:
    eng = gpu_bench.engine("llama3_8b", *extra)
    eng.generate([list(range(100, 1124))], gpu_bench._sp(max_tokens=4, temperature=0,
                                                          ignore_eos=True))
    table = gpu_bench._graph_kernel_table(eng, 1)
    res = {"total_us": round(sum(r["us_per_replay"] for r in table), 1),
           "replay_ms": gpu_bench._replay_ms(eng), "kernels": table[:30]}
    gpu_bench.free(eng)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default="fp8:2,fp8:0", help="weights:prefetch depth, in order")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out: dict = {"meta": gpu_bench.probe_meta(arms=a.arms)}
    for arm in a.arms.split(","):
        label, depth = arm.split(":")
        extra, b = {"fp8": FP8, "bf16": ()}[label], int(depth)
        gemv.PREFETCH_TILES = b  # read at each launch, so at graph capture
        r = gpu_bench.bench_decode("llama3_8b", 1024, 256, extra)
        out[f"{label}_pf{b}"] = r
        print(label, b, r["decode_tok_s"], r["graph_replay_ms_bs1"], r["bandwidth_util"],
              r["first_tokens"][:8], flush=True)
        if a.table and label == "fp8":
            out[f"{label}_pf{b}_table"] = kernel_table(extra)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
