"""From per-request timings to the benchmark's numbers (`BenchmarkMetrics`).

TPOT is computed per request as (latency − TTFT) / (output tokens − 1) and then averaged, so it
does not depend on how the server chunked its stream; ITL is averaged per received chunk and does.
Their ratio is reported as the merge factor.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from atom.benchmarks.backend_request_func import RequestFuncOutput
from atom.benchmarks.benchmark_datasets import SampleRequest

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


@dataclass
class LatencyStats:
    """One latency metric in milliseconds."""

    mean: float = 0.0
    median: float = 0.0
    std: float = 0.0
    percentiles: list[tuple[float, float]] = field(default_factory=list)  # (p, value)

    @classmethod
    def of(cls, seconds: Sequence[float], percentiles: Sequence[float]) -> "LatencyStats":
        if len(seconds) == 0:
            return cls(percentiles=[(p, 0.0) for p in percentiles])
        ms = np.asarray(seconds, dtype=np.float64) * 1000.0
        return cls(float(ms.mean()), float(np.median(ms)), float(ms.std()),
                   [(p, float(np.percentile(ms, p))) for p in percentiles])


@dataclass
class BenchmarkMetrics:
    completed: int
    failed: int
    total_input: int
    total_output: int
    duration_s: float
    request_throughput: float
    request_goodput: Optional[float]
    output_throughput: float
    total_token_throughput: float
    concurrency: float  # mean in-flight requests: Σ E2EL / duration
    max_concurrency_observed: int
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    merge_factor: float  # mean ITL / mean TPOT; 1.0 = one token per chunk
    server_total_input: Optional[int] = None  # Σ usage.prompt_tokens, when every response said

    def latency(self, name: str) -> LatencyStats:
        return getattr(self, name)


def parse_goodput(pairs: Optional[Sequence[str]]) -> dict[str, float]:
    """`["ttft:100", "tpot:50"]` → {"ttft": 100.0, "tpot": 50.0} (milliseconds)."""
    slos: dict[str, float] = {}
    for pair in pairs or []:
        for item in pair.split():
            key, sep, value = item.partition(":")
            if not sep or key not in GOODPUT_METRICS:
                raise ValueError(f"--goodput {item!r}: expected KEY:VALUE with KEY in {GOODPUT_METRICS}")
            if float(value) < 0:
                raise ValueError(f"--goodput {item!r}: the SLO must be >= 0 ms")
            slos[key] = float(value)
    return slos


def output_token_count(out: RequestFuncOutput, tokenizer: Any) -> int:
    """What the server reported, else the generated text re-tokenized."""
    if out.output_tokens:
        return out.output_tokens
    if tokenizer is None or not out.generated_text:
        return 0
    return len(tokenizer.encode(out.generated_text, add_special_tokens=False))


def request_tpot(out: RequestFuncOutput, output_len: int) -> float:
    return (out.latency - out.ttft) / (output_len - 1) if output_len > 1 else 0.0


def meets_slos(out: RequestFuncOutput, output_len: int, slos: dict[str, float]) -> bool:
    observed = {"ttft": out.ttft, "tpot": request_tpot(out, output_len), "e2el": out.latency}
    return all(observed[k] * 1000.0 <= v for k, v in slos.items())


def peak_concurrency(outputs: Sequence[RequestFuncOutput]) -> int:
    """Most requests in flight at once, from each request's send time and latency."""
    events = sorted([(o.start_time, 1) for o in outputs if o.success]
                    + [(o.start_time + o.latency, -1) for o in outputs if o.success],
                    key=lambda e: (e[0], e[1]))
    peak = current = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def _server_input(outputs: Sequence[RequestFuncOutput]) -> Optional[int]:
    done = [o for o in outputs if o.success]
    if not done or any(o.server_prompt_tokens <= 0 for o in done):
        return None
    return sum(o.server_prompt_tokens for o in done)


def calculate_metrics(
    input_requests: Sequence[SampleRequest],
    outputs: Sequence[RequestFuncOutput],
    dur_s: float,
    tokenizer: Any,
    selected_percentiles: Sequence[float] = (99.0,),
    goodput_config_dict: Optional[dict[str, float]] = None,
) -> tuple[BenchmarkMetrics, list[int]]:
    """Returns the metrics and every request's output length (0 for a failed request)."""
    output_lens: list[int] = []
    ttfts: list[float] = []
    tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    total_input = good = 0
    for req, out in zip(input_requests, outputs):
        if not out.success:
            output_lens.append(0)
            continue
        n = output_token_count(out, tokenizer)
        output_lens.append(n)
        total_input += req.prompt_len
        ttfts.append(out.ttft)
        if n > 1:
            tpots.append(request_tpot(out, n))
        itls.extend(out.itl)
        e2els.append(out.latency)
        good += bool(goodput_config_dict) and meets_slos(out, n, goodput_config_dict)
    completed = len(e2els)
    if completed == 0:
        warnings.warn("All requests failed: check the server, the endpoint and the backend.", stacklevel=2)
    total_output = sum(output_lens)
    tpot = LatencyStats.of(tpots, selected_percentiles)
    itl = LatencyStats.of(itls, selected_percentiles)
    metrics = BenchmarkMetrics(
        completed=completed,
        failed=len(outputs) - completed,
        total_input=total_input,
        total_output=total_output,
        duration_s=dur_s,
        request_throughput=completed / dur_s,
        request_goodput=good / dur_s if goodput_config_dict else None,
        output_throughput=total_output / dur_s,
        total_token_throughput=(total_input + total_output) / dur_s,
        concurrency=sum(e2els) / dur_s,
        max_concurrency_observed=peak_concurrency(outputs),
        ttft=LatencyStats.of(ttfts, selected_percentiles),
        tpot=tpot,
        itl=itl,
        e2el=LatencyStats.of(e2els, selected_percentiles),
        merge_factor=itl.mean / tpot.mean if tpot.mean > 0 else 0.0,
        server_total_input=_server_input(outputs),
    )
    return metrics, output_lens
