"""Disconnects free KV blocks, a dead engine core is reported (503, failed streams), profiling and
metrics work over HTTP."""
from __future__ import annotations

import time

import httpx
import pytest

from srv_process import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}  # ignored by servers started without a key


def metric(base_url: str, name: str) -> float:
    for line in httpx.get(base_url + "/metrics", headers=AUTH, timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def wait_for(pred, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_stream_disconnect_frees_blocks(server, auth):
    url = server.base_url
    assert wait_for(lambda: metric(url, "atom:num_requests_running") == 0)
    start_free = metric(url, "atom:kv_cache_free_blocks")
    body = {"prompt": "y" * 200, "max_tokens": 1500, "stream": True}
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", url + "/v1/completions", json=body, headers=auth) as r:
            seen = 0
            lines = r.iter_lines()  # held: dropping the iterator would close the connection early
            for line in lines:
                seen += line.startswith("data: ")
                if seen == 20:
                    break
            assert metric(url, "atom:kv_cache_free_blocks") < start_free
            assert metric(url, "atom:num_requests_running") == 1
    # the connection is closed here, mid-stream
    assert wait_for(lambda: metric(url, "atom:kv_cache_free_blocks") == start_free)
    assert metric(url, "atom:num_requests_running") == 0


def test_nonstream_disconnect_frees_blocks(server, auth):
    url = server.base_url
    assert wait_for(lambda: metric(url, "atom:num_requests_running") == 0)
    start_free = metric(url, "atom:kv_cache_free_blocks")
    aborted = metric(url, 'atom:request_aborted_total')
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json={"prompt": "z" * 100, "max_tokens": 1500},
                   headers=auth, timeout=0.5)
    assert wait_for(lambda: metric(url, "atom:kv_cache_free_blocks") == start_free)
    assert metric(url, "atom:request_aborted_total") == aborted + 1


def test_metrics_exposed(server, auth):
    httpx.post(server.base_url + "/v1/completions", json={"prompt": "m", "max_tokens": 4}, headers=auth)
    r = httpx.get(server.base_url + "/metrics", headers=auth)
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = r.text
    for name in ("atom:num_requests_running", "atom:num_requests_waiting", "atom:kv_cache_usage_perc",
                 "atom:prefix_cache_hit_rate", "atom:prompt_tokens_total", "atom:generation_tokens_total",
                 "atom:time_to_first_token_seconds_bucket", "atom:time_per_output_token_seconds_bucket",
                 "atom:e2e_request_latency_seconds_bucket", "atom:stream_longest_silence_seconds"):
        assert name in text, name
    assert metric(server.base_url, "atom:generation_tokens_total") >= 4


def test_profiling_writes_traces(server, auth, profiler_dir):
    url = server.base_url
    assert httpx.post(url + "/start_profile", headers=auth, timeout=120).status_code == 200
    httpx.post(url + "/v1/completions", json={"prompt": "p", "max_tokens": 4}, headers=auth, timeout=30)
    r = httpx.post(url + "/stop_profile", headers=auth, timeout=120)
    assert r.status_code == 200, r.text
    traces = list((profiler_dir / "rank_0").glob("*.json.gz"))
    assert traces and traces[0].stat().st_size > 0
