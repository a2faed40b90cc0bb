"""Sweep directory → throughput/latency frontier plots and an HTML table.

`python -m atom.benchmarks.plots multirun/2026-11-30/02-00-00 [--out DIR] [--stat median]`

Every benchmark result JSON under the directory is one point; points sharing a `label` (engine or
config) form one line, ordered by concurrency then request rate, so each line traces how output
throughput is bought with latency. TPOT is the x-axis of the main plot because it stays honest
when a server merges stream chunks (ITL does not).
"""
from __future__ import annotations

import argparse
import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence

from atom.benchmarks.benchmark_utils import read_result_json

PLOTS = (("tpot", "TPOT"), ("ttft", "TTFT"))
TABLE_COLUMNS = ("label", "max_concurrency", "request_rate", "num_prompts", "completed", "failed",
                 "output_throughput", "request_throughput", "request_goodput", "{stat}_ttft_ms",
                 "p99_ttft_ms", "{stat}_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "itl_tpot_ratio")


def load_results(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every result JSON below `sweep_dir` (PyTorch-format twins and other JSON skipped)."""
    results = []
    for path in sorted(sweep_dir.rglob("*.json")):
        if path.name.endswith(".pytorch.json") or ".hydra" in path.parts:
            continue
        try:
            data = read_result_json(path)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and "output_throughput" in data:
            data["_path"] = str(path.relative_to(sweep_dir))
            results.append(data)
    return results


def _order(r: dict[str, Any]) -> tuple[float, float]:
    conc = r.get("max_concurrency")
    rate = r.get("request_rate")
    return (math.inf if conc is None else float(conc), math.inf if rate is None else float(rate))


def group_by_label(results: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[str(r.get("label") or f"{r.get('backend')}:{r.get('model_id')}")].append(r)
    return {label: sorted(points, key=_order) for label, points in sorted(groups.items())}


def _point_tag(r: dict[str, Any]) -> str:
    if r.get("max_concurrency") is not None:
        return f"c{r['max_concurrency']}"
    rate = r.get("request_rate")
    return "inf" if rate is None or math.isinf(float(rate)) else f"{float(rate):g}/s"


def plot_frontier(groups: dict[str, list[dict[str, Any]]], metric: str, name: str, stat: str,
                  path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for label, points in groups.items():
        xs = [p.get(f"{stat}_{metric}_ms", 0.0) for p in points]
        ys = [p["output_throughput"] for p in points]
        ax.plot(xs, ys, marker="o", label=label)
        for x, y, p in zip(xs, ys, points):
            ax.annotate(_point_tag(p), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(f"{stat} {name} (ms)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_title(f"Output throughput vs {name}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.2f}"
    return html.escape("" if value is None else str(value))


def write_html(groups: dict[str, list[dict[str, Any]]], images: Sequence[Path], stat: str,
               path: Path) -> Path:
    columns = [c.format(stat=stat) for c in TABLE_COLUMNS] + ["_path"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    rows = "\n".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>"
                     for points in groups.values() for r in points)
    imgs = "\n".join(f'<img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}">' for p in images)
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>atom benchmark sweep</title>"
        "<style>table{border-collapse:collapse;font:13px sans-serif}td,th{border:1px solid #ccc;"
        "padding:3px 6px;text-align:right}img{max-width:48%}</style></head><body>"
        f"<h1>Benchmark sweep</h1>{imgs}<table><tr>{head}</tr>\n{rows}</table></body></html>",
        encoding="utf-8")
    return path


def make_plots(sweep_dir: Path, out_dir: Optional[Path] = None, stat: str = "median") -> list[Path]:
    """Writes throughput_vs_tpot.png, throughput_vs_ttft.png and index.html; returns their paths."""
    results = load_results(sweep_dir)
    if not results:
        raise FileNotFoundError(f"no benchmark result JSON under {sweep_dir}")
    out = out_dir or sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    groups = group_by_label(results)
    images = [plot_frontier(groups, metric, name, stat, out / f"throughput_vs_{metric}.png")
              for metric, name in PLOTS]
    return images + [write_html(groups, images, stat, out / "index.html")]


def main(argv: Optional[Sequence[str]] = None) -> list[Path]:
    parser = argparse.ArgumentParser(description="Plot a benchmark sweep directory.")
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="Output directory (default: sweep_dir).")
    parser.add_argument("--stat", choices=("mean", "median", "p99"), default="median")
    args = parser.parse_args(argv)
    paths = make_plots(args.sweep_dir, args.out, args.stat)
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    main()
