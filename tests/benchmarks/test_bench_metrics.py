"""calculate_metrics on hand-built timings, where every number can be worked out by hand."""
from __future__ import annotations

import pytest

from atom.benchmarks.backend_request_func import RequestFuncOutput
from atom.benchmarks.benchmark_datasets import SampleRequest
from atom.benchmarks.metrics import calculate_metrics, parse_goodput, peak_concurrency


def _out(ttft: float, latency: float, n: int, chunks: int, start: float = 0.0) -> RequestFuncOutput:
    gap = (latency - ttft) / (chunks - 1) if chunks > 1 else 0.0
    return RequestFuncOutput(success=True, ttft=ttft, latency=latency, output_tokens=n,
                             itl=[gap] * (chunks - 1), start_time=start)


REQS = [SampleRequest("p", 10, 5), SampleRequest("p", 20, 5), SampleRequest("p", 30, 5)]


def test_tpot_throughput_concurrency_and_merge_factor():
    outs = [_out(0.1, 0.5, 5, 5, start=0.0), _out(0.2, 1.0, 9, 3, start=0.5),
            RequestFuncOutput(success=False, error="x")]
    m, lens = calculate_metrics(REQS, outs, dur_s=2.0, tokenizer=None, selected_percentiles=[50, 99])
    assert lens == [5, 9, 0]
    assert (m.completed, m.failed, m.total_input, m.total_output) == (2, 1, 30, 14)
    tpots = [(0.5 - 0.1) / 4, (1.0 - 0.2) / 8]
    assert m.tpot.mean == pytest.approx(1000 * sum(tpots) / 2)
    assert m.request_throughput == pytest.approx(1.0)
    assert m.output_throughput == pytest.approx(7.0)
    assert m.total_token_throughput == pytest.approx(22.0)
    assert m.concurrency == pytest.approx((0.5 + 1.0) / 2.0)
    itls = [0.1] * 4 + [0.4] * 2
    assert m.itl.mean == pytest.approx(1000 * sum(itls) / len(itls))
    assert m.merge_factor == pytest.approx(m.itl.mean / m.tpot.mean)
    assert m.ttft.median == pytest.approx(150.0)
    assert dict(m.e2el.percentiles)[50] == pytest.approx(750.0)
    assert m.request_goodput is None
    assert m.max_concurrency_observed == 1  # the second starts as the first ends


def test_goodput_counts_requests_meeting_every_slo():
    outs = [_out(0.05, 0.5, 10, 10), _out(0.3, 0.6, 10, 10), _out(0.05, 3.0, 10, 10)]
    m, _ = calculate_metrics(REQS, outs, 1.0, None, [99], parse_goodput(["ttft:100", "tpot:100"]))
    assert m.request_goodput == pytest.approx(1.0)  # #2 misses TTFT, #3 misses TPOT
    m, _ = calculate_metrics(REQS, outs, 2.0, None, [99], parse_goodput(["e2el:1000"]))
    assert m.request_goodput == pytest.approx(1.0)


def test_output_tokens_fall_back_to_the_tokenizer(tokenizer):
    out = RequestFuncOutput(success=True, ttft=0.1, latency=0.4, generated_text="From fairest creatures",
                            itl=[0.15, 0.15])
    m, lens = calculate_metrics(REQS[:1], [out], 1.0, tokenizer)
    assert lens == [3] and m.tpot.mean == pytest.approx(150.0)


def test_single_token_outputs_have_no_tpot():
    m, _ = calculate_metrics(REQS[:1], [_out(0.1, 0.1, 1, 1)], 1.0, None)
    assert m.tpot.mean == 0.0 and m.merge_factor == 0.0


def test_parse_goodput_rejects_bad_input():
    assert parse_goodput(["ttft:100 tpot:50"]) == {"ttft": 100.0, "tpot": 50.0}
    for bad in (["itl:5"], ["ttft"], ["ttft:-1"]):
        with pytest.raises(ValueError):
            parse_goodput(bad)


def test_peak_concurrency_overlaps():
    outs = [_out(0.1, 1.0, 2, 2, start=0.0), _out(0.1, 1.0, 2, 2, start=0.5),
            _out(0.1, 1.0, 2, 2, start=0.7)]
    assert peak_concurrency(outs) == 3
