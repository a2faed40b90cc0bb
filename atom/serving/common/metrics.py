"""Prometheus `atom:*` metrics, on a registry owned by the app (no process-global state).

Engine gauges and token counters are read from the latest EngineStats at scrape time (the core
counts them; counting again here would drift). Latency histograms are observed where requests
finish, in this process. `atom:stream_longest_silence_seconds` is the watchdog's view at the frame.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from atom.model_engine.messages import EngineStats
from atom.model_engine.output_processor import RequestOutput
from atom.spec_decode.stats import acceptance_rate, average_tokens_per_forward, per_position_acceptance

# Litestar appends "; charset=utf-8" to a text/* media type itself (named here, it was sent twice).
CONTENT_TYPE = "text/plain; version=0.0.4"

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0)
_TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
                 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
_E2E_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0)


class _EngineStatsCollector(Collector):
    """Gauges and counters straight from the core's latest stats."""

    def __init__(self, stats: Callable[[], EngineStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Any]:
        s = self._stats()
        yield GaugeMetricFamily("atom:num_requests_running", "Requests in the running batch",
                                value=s.num_running)
        yield GaugeMetricFamily("atom:num_requests_waiting", "Requests waiting to be scheduled",
                                value=s.num_waiting)
        yield GaugeMetricFamily("atom:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1)",
                                value=s.kv_usage)
        yield GaugeMetricFamily("atom:kv_cache_free_blocks", "KV-cache blocks free", value=s.kv_blocks_free)
        yield GaugeMetricFamily("atom:kv_cache_total_blocks", "KV-cache blocks in the pool",
                                value=s.kv_blocks_total)
        yield GaugeMetricFamily("atom:prefix_cache_hit_rate", "Prefix-cache hit rate over prompt blocks",
                                value=s.prefix_hit_rate)
        for name, doc, value in (
                ("atom:prompt_tokens", "Prompt tokens processed", s.prompt_tokens_total),
                ("atom:generation_tokens", "Tokens generated", s.generation_tokens_total),
                ("atom:prefix_cache_queries", "Prompt blocks looked up in the prefix cache",
                 s.prefix_cache_queries),
                ("atom:prefix_cache_hits", "Prompt blocks found in the prefix cache", s.prefix_cache_hits),
                ("atom:num_preemptions", "Sequences preempted", s.num_preempted_total),
                ("atom:engine_steps", "Engine steps run", s.num_steps),
                ("atom:spec_decode_num_draft_tokens", "Draft tokens proposed", s.spec_draft_tokens),
                ("atom:spec_decode_num_accepted_tokens", "Draft tokens accepted", s.spec_accepted_tokens)):
            yield CounterMetricFamily(name, doc, value=value)
        if s.spec_num_speculative_tokens:
            yield from _mtp_metrics(s)


def _mtp_metrics(s: EngineStats) -> Iterable[Any]:
    """`atom:mtp_*`: the /debug/mtp_stats figures (atom/spec_decode/stats.py) as metrics."""
    for name, doc, value in (
            ("atom:mtp_draft_tokens", "Draft tokens verified", s.spec_draft_tokens),
            ("atom:mtp_accepted_tokens", "Draft tokens accepted", s.spec_accepted_tokens),
            ("atom:mtp_verify_forwards", "Sequence-steps that verified drafts",
             s.spec_verify_forwards)):
        yield CounterMetricFamily(name, doc, value=value)
    yield GaugeMetricFamily("atom:mtp_acceptance_rate", "Accepted / drafted tokens",
                            value=acceptance_rate(s))
    yield GaugeMetricFamily("atom:mtp_average_tokens_per_forward",
                            "Tokens per verify forward (1 + accepted drafts)",
                            value=average_tokens_per_forward(s))
    per_position = GaugeMetricFamily("atom:mtp_per_position_acceptance_rate",
                                     "Share of drafts at a slot that were accepted",
                                     labels=["position"])
    for j, rate in enumerate(per_position_acceptance(s)):
        per_position.add_metric([str(j)], rate)
    yield per_position


class AtomMetricsExporter:
    def __init__(self, stats: Callable[[], EngineStats], longest_silence: Callable[[], float],
                 model_name: str, core_silence: Callable[[], float] = lambda: 0.0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, labels = self.registry, ["model_name"]
        self._model = model_name
        r.register(_EngineStatsCollector(stats))
        silence = Gauge("atom:stream_longest_silence_seconds",
                        "Age of the oldest open gap between SSE frames of any stream (first frame "
                        "excluded); non-zero and growing means a client is receiving nothing",
                        registry=r)
        silence.set_function(longest_silence)
        core_age = Gauge("atom:engine_core_silence_seconds",
                         "Seconds since the engine core last answered (a step, a reply or its idle "
                         "heartbeat); growing past a step's length means the core is stuck",
                         registry=r)
        core_age.set_function(core_silence)
        self.ttft = Histogram("atom:time_to_first_token_seconds", "Time to first token",
                              labels, buckets=_TTFT_BUCKETS, registry=r).labels(model_name)
        self.tpot = Histogram("atom:time_per_output_token_seconds", "Time per output token after the first",
                              labels, buckets=_TPOT_BUCKETS, registry=r).labels(model_name)
        self.e2e = Histogram("atom:e2e_request_latency_seconds", "Request latency, arrival to finish",
                             labels, buckets=_E2E_BUCKETS, registry=r).labels(model_name)
        self._success = Counter("atom:request_success", "Sequences finished, by reason",
                                ["model_name", "finished_reason"], registry=r)
        self._aborted = Counter("atom:request_aborted", "Sequences aborted (client gone or error)",
                                labels, registry=r).labels(model_name)
        self._http_inflight = Gauge("atom:http_requests_in_flight", "Generation requests being served",
                                    labels, registry=r).labels(model_name)

    def request_started(self) -> None:
        self._http_inflight.inc()

    def request_done(self) -> None:
        self._http_inflight.dec()

    def request_finished(self, out: RequestOutput) -> None:
        if out.first_token_time:
            self.ttft.observe(out.ttft)
        if out.num_output_tokens > 1:
            self.tpot.observe(out.tpot)
        self.e2e.observe(out.latency)
        self._success.labels(self._model, out.finish_reason or "stop").inc()

    def request_aborted(self, n: int = 1) -> None:
        self._aborted.inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
