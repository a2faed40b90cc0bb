"""Each kernel's marginal cost in the batch-1 decode graph: how much later the chain ends with it
(its end minus the end of the kernel before it, CUPTI timestamps of a graph replay), which sums
to the replay, unlike per-kernel durations, which count the PDL waits of kernels launched early.

Why: the fp8 8B step replays in ~2.86 ms against 1.95 for the same bytes a kernel an operation
(decode_step_floor.py); taking a kernel out (decode_step_takeaway.py) says what it costs in
place but not where, inside the chain, the time goes. Grouped by (kernel before, kernel): the
8B's `_gemv_kernel` after the down projection is qkv, after decode attention o. Also each
group's lead: how long before the kernel in front ended its first program started.

    python research/probes/decode_step_timeline.py [--bf16] [--out timeline.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _kernels(prof) -> list[tuple[str, float, float]]:
    """(name, start µs, end µs) of every GPU kernel the profiler saw, in start order."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > 0:
            out.append((e.name[:60], e.time_range.start, e.time_range.end))
    return sorted(out, key=lambda k: k[1])


def main() -> None:
    import gpu_bench as g

    p = argparse.ArgumentParser()
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    eng = g.engine("llama3_8b", *(() if args.bf16 else ("quant=fp8", "kv_cache=fp8")))
    eng.generate([list(range(100, 1124))], g._sp(max_tokens=4, temperature=0, ignore_eos=True))
    graph, _ = eng.core.executor.runner.graphs.graphs[1]
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    reps = 5
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            graph.replay()
            torch.cuda.synchronize()
    ks = _kernels(prof)
    per = len(ks) // reps
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    spans = []
    for r in range(reps):
        run = ks[r * per:(r + 1) * per]
        spans.append(run[-1][2] - run[0][1])
        for (pn, _, pe), (n, s, e) in zip(run, run[1:]):
            groups[f"{pn} -> {n}"].append((e - pe, e - s, pe - s))
    rows = []
    for key, v in groups.items():
        rows.append({"pair": key, "count_per_replay": len(v) / reps,
                     "marginal_us": round(statistics.median(x[0] for x in v), 2),
                     "duration_us": round(statistics.median(x[1] for x in v), 2),
                     "lead_us": round(statistics.median(x[2] for x in v), 2),
                     "total_marginal_us": round(sum(x[0] for x in v) / reps, 1)})
    rows.sort(key=lambda r: -r["total_marginal_us"])
    out = {"kernels_per_replay": per, "replay_span_us": round(statistics.median(spans), 1),
           "replay_ms": g._replay_ms(eng), "rows": rows}
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
