"""The benchmark's printed table and its result dictionary (what `--save-result` writes).

Every latency metric is stored in the result whatever `--percentile-metrics` says, so a sweep can
always be plotted; the flag only chooses what is printed.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from atom.benchmarks.backend_request_func import RequestFuncOutput
from atom.benchmarks.benchmark_datasets import SampleRequest
from atom.benchmarks.metrics import LATENCY_METRICS, BenchmarkMetrics
from atom.benchmarks.spec_decode_stats import SpecDecodeStats

TITLES = {"ttft": "Time to First Token", "tpot": "Time per Output Token (excl. 1st token)",
          "itl": "Inter-token Latency", "e2el": "End-to-end Latency"}
WIDTH = 50
# Mean ITL over mean TPOT: how many tokens the server packs into one streamed chunk on average.
MERGE_LABEL = "ITL/TPOT (merge factor):"


def percentile_key(p: float) -> str:
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def metrics_dict(m: BenchmarkMetrics, goodput_slos: dict[str, float]) -> dict[str, Any]:
    """Flat, JSON-friendly: `mean_ttft_ms`, `p99_tpot_ms`, `output_throughput`, …"""
    d: dict[str, Any] = {
        "duration": m.duration_s,
        "completed": m.completed,
        "failed": m.failed,
        "total_input_tokens": m.total_input,
        "total_output_tokens": m.total_output,
        "server_total_input_tokens": m.server_total_input,
        "request_throughput": m.request_throughput,
        "request_goodput": m.request_goodput,
        "goodput_slos_ms": goodput_slos or None,
        "output_throughput": m.output_throughput,
        "total_token_throughput": m.total_token_throughput,
        "concurrency": m.concurrency,
        "max_concurrency_observed": m.max_concurrency_observed,
        "itl_tpot_ratio": m.merge_factor,
    }
    for name in LATENCY_METRICS:
        stats = m.latency(name)
        d[f"mean_{name}_ms"] = stats.mean
        d[f"median_{name}_ms"] = stats.median
        d[f"std_{name}_ms"] = stats.std
        for p, value in stats.percentiles:
            d[f"{percentile_key(p)}_{name}_ms"] = value
    return d


def spec_decode_dict(stats: Optional[SpecDecodeStats]) -> Optional[dict[str, Any]]:
    if stats is None:
        return None
    return {"draft_tokens": stats.draft_tokens, "accepted_tokens": stats.accepted_tokens,
            "acceptance_rate": stats.acceptance_rate, "accept_length": stats.accept_length}


def per_request_dict(requests: Sequence[SampleRequest], outputs: Sequence[RequestFuncOutput],
                     output_lens: Sequence[int], detailed: bool) -> dict[str, Any]:
    d: dict[str, Any] = {
        "input_lens": [r.prompt_len for r in requests],
        "output_lens": list(output_lens),
        "ttfts": [o.ttft for o in outputs],
        "latencies": [o.latency for o in outputs],
        "itls": [o.itl for o in outputs],
        "errors": [o.error for o in outputs],
    }
    if detailed:
        d["generated_texts"] = [o.generated_text for o in outputs]
    return d


def _line(label: str, value: Any) -> str:
    text = f"{value:<10.2f}" if isinstance(value, float) else f"{value:<10}"
    return f"{label:<40} {text}"


def _rule(title: str, fill: str = "-") -> str:
    return f"{title:{fill}^{WIDTH}}"


def _server_input_lines(m: BenchmarkMetrics, byte_tokenizer: bool) -> list[str]:
    """The server's own prompt count, and a warning when it disagrees with the benchmark's
    tokenizer: the workload the server saw is then not the one asked for. The fix it names is
    one the user can make: never `--tokenizer bytes` to someone already using it."""
    if m.server_total_input is None:
        return []
    lines = [_line("Total input tokens (server count):", m.server_total_input)]
    if abs(m.server_total_input - m.total_input) > 0.05 * max(m.total_input, 1):
        fix = ("--tokenizer bytes matches a dummy-weight atom server only" if byte_tokenizer
               else "--tokenizer bytes for a dummy-weight atom server")
        lines.append("WARNING: the server counts the prompts differently: pass the served model's "
                     f"tokenizer (a local dir, a .gguf or a conf/model name; {fix}).")
    return lines


def format_report(m: BenchmarkMetrics, selected_metrics: Sequence[str],
                  spec: Optional[SpecDecodeStats], max_concurrency: Optional[int],
                  request_rate: float, byte_tokenizer: bool = False) -> str:
    lines = [_rule(" Serving Benchmark Result ", "="),
             _line("Successful requests:", m.completed),
             _line("Failed requests:", m.failed)]
    if max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", max_concurrency))
    if request_rate != float("inf"):
        lines.append(_line("Request rate configured (RPS):", float(request_rate)))
    lines += [_line("Benchmark duration (s):", m.duration_s),
              _line("Total input tokens:", m.total_input),
              *_server_input_lines(m, byte_tokenizer),
              _line("Total generated tokens:", m.total_output),
              _line("Request throughput (req/s):", m.request_throughput)]
    if m.request_goodput is not None:
        lines.append(_line("Request goodput (req/s):", m.request_goodput))
    lines += [_line("Output token throughput (tok/s):", m.output_throughput),
              _line("Total token throughput (tok/s):", m.total_token_throughput),
              _line("Concurrency (mean in flight):", m.concurrency),
              _line("Peak concurrent requests:", m.max_concurrency_observed)]
    for name in LATENCY_METRICS:
        if name not in selected_metrics:
            continue
        stats, abbr = m.latency(name), name.upper()
        lines += [_rule(TITLES[name]),
                  _line(f"Mean {abbr} (ms):", stats.mean),
                  _line(f"Median {abbr} (ms):", stats.median),
                  _line(f"Std {abbr} (ms):", stats.std)]
        lines += [_line(f"P{percentile_key(p)[1:]} {abbr} (ms):", v) for p, v in stats.percentiles]
        if name == "itl":
            lines.append(_line(MERGE_LABEL, m.merge_factor))
    if "itl" not in selected_metrics:
        lines += [_rule("Stream chunking"), _line(MERGE_LABEL, m.merge_factor)]
    if spec is not None:
        lines += [_rule("Speculative Decoding"),
                  _line("Draft tokens:", spec.draft_tokens),
                  _line("Accepted draft tokens:", spec.accepted_tokens),
                  _line("Acceptance Rate (%):", spec.acceptance_rate * 100.0)]
        if spec.accept_length is not None:
            lines.append(_line("Accept Length (tokens/forward):", spec.accept_length))
    lines.append("=" * WIDTH)
    return "\n".join(lines)
