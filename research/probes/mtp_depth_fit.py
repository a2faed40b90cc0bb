"""Issue 22's benchmark 3 carried to DeepSeek-R1's depth: MTP's speed-up at 61 layers from
reduced-depth runs of `benchmarks/mtp_bench.py`.

Why: R1 at its real widths fits one H200 only at a few layers, and there the next-n layer (a
whole MoE decoder layer plus the 129k-wide head) is a large share of a step, so MTP loses to
plain decoding (H200.md runs 58 and 68). At 61 layers it is about a sixtieth. Each variant's
time per forward is fitted as a + b·L over the depths measured in one command (dummy weights,
so every layer past the first three dense ones costs the same), then read at L = 61:
speed-up = tokens per forward × t_plain(61) / t_mtp(61). The verify step's extra cost per layer
(more routed experts read at 1 + k tokens a sequence) is in b, the draft layer's cost in a.

    python benchmarks/mtp_bench.py --layers 4 --out mtp4.json ...
    python benchmarks/mtp_bench.py --layers 6 --out mtp6.json ...
    python research/probes/mtp_depth_fit.py mtp4.json mtp6.json [--depth 61]
"""
from __future__ import annotations

import argparse
import json
import re
from typing import Any


def forward_ms(run: dict[str, Any]) -> float:
    """Milliseconds a forward (a verify step) takes: a batch of sequences advances by tokens
    per forward each step."""
    tpf = run["tokens_per_forward"] or 1.0
    return 1e3 * run["batch"] * tpf / run["decode_tok_s"]


def depth_of(res: dict[str, Any]) -> int:
    return int(re.search(r"--layers (\d+)", res["meta"]["command"]).group(1))


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (a, b) of t = a + b·L."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", help="mtp_bench JSONs at two or more depths")
    ap.add_argument("--depth", type=int, default=61, help="R1's decoder layers")
    args = ap.parse_args()
    results = [json.load(open(f)) for f in args.files]
    depths = [depth_of(r) for r in results]
    assert len(set(depths)) >= 2, "need runs at two depths at least"
    variants = [k for k in results[0] if k != "meta" and "eager" not in k]
    batches = [r["batch"] for r in results[0]["plain"]["runs"]]
    for batch in batches:
        line: dict[str, Any] = {}
        t_plain = None
        for name in variants:
            pts, tpfs = [], []
            for depth, res in zip(depths, results):
                run = next(r for r in res[name]["runs"] if r["batch"] == batch)
                pts.append((depth, forward_ms(run)))
                tpfs.append(run["tokens_per_forward"] or 1.0)
            a, b = fit(pts)
            t = a + b * args.depth
            tpf = sum(tpfs) / len(tpfs)
            if name == "plain":
                t_plain = t
            line[name] = {"ms_per_forward": {d: round(ms, 3) for d, ms in pts},
                          "a_ms": round(a, 3), "b_ms_per_layer": round(b, 4),
                          f"ms_at_{args.depth}": round(t, 2), "tokens_per_forward": round(tpf, 3)}
        assert t_plain is not None
        for name, v in line.items():
            v[f"speedup_at_{args.depth}"] = round(v["tokens_per_forward"] * t_plain
                                                  / v[f"ms_at_{args.depth}"], 3)
        print(f"batch {batch}:", json.dumps(line))


if __name__ == "__main__":
    main()
