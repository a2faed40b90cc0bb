"""Disconnects free KV blocks, a dead engine core is reported (503, failed streams), profiling and
metrics work over HTTP."""
from __future__ import annotations

import os
import signal
import time

import httpx
import openai
import pytest

from conftest import API_KEY, synthetic_args
from srv_process import ServerProcess


def metric(base_url: str, name: str) -> float:
    for line in httpx.get(base_url + "/metrics", timeout=10).text.splitlines():
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
    text = httpx.get(server.base_url + "/metrics").text
    for name in ("atom:num_requests_running", "atom:num_requests_waiting", "atom:kv_cache_usage_perc",
                 "atom:prefix_cache_hit_rate", "atom:prompt_tokens_total", "atom:generation_tokens_total",
                 "atom:time_to_first_token_seconds_bucket", "atom:time_per_output_token_seconds_bucket",
                 "atom:e2e_request_latency_seconds_bucket", "atom:stream_longest_silence_seconds"):
        assert name in text, name
    assert metric(server.base_url, "atom:generation_tokens_total") >= 4


def test_profiling_writes_traces(server, auth, profiler_dir):
    url = server.base_url
    assert httpx.post(url + "/start_profile", timeout=120).status_code == 200
    httpx.post(url + "/v1/completions", json={"prompt": "p", "max_tokens": 4}, headers=auth, timeout=30)
    r = httpx.post(url + "/stop_profile", timeout=120)
    assert r.status_code == 200, r.text
    traces = list((profiler_dir / "rank_0").glob("*.json.gz"))
    assert traces and traces[0].stat().st_size > 0


@pytest.fixture(scope="module")
def doomed(tmp_path_factory) -> ServerProcess:
    """A server whose engine core the test kills (no API key, no profiler dir)."""
    srv = ServerProcess(synthetic_args(rate=100.0), log_path=tmp_path_factory.mktemp("logs") / "doomed.log")
    yield srv
    srv.stop()


def test_profile_without_dir_is_400(doomed):
    r = httpx.post(doomed.base_url + "/start_profile", timeout=10)
    assert r.status_code == 400 and "torch-profiler-dir" in r.json()["error"]["message"]


def test_dead_engine_fails_streams_and_health(doomed):
    client = openai.OpenAI(base_url=doomed.base_url + "/v1", api_key="none", max_retries=0, timeout=30)
    stream = client.completions.create(model="tiny_llama", prompt="d", max_tokens=2000, stream=True)
    it = iter(stream)
    next(it)
    os.kill(doomed.core_pid(), signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(openai.APIError):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 10  # ended with an error, not a hang
    r = httpx.get(doomed.base_url + "/health", timeout=10)
    assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable_error"
    r = httpx.post(doomed.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_dead"
    r = httpx.post(doomed.base_url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]},
                   timeout=10)
    assert r.status_code == 503


def test_server_shutdown_leaves_no_processes(tmp_path):
    srv = ServerProcess(synthetic_args(), log_path=tmp_path / "s.log")
    core = srv.core_pid()
    srv.stop()
    assert srv.proc.returncode is not None
    assert not os.path.exists(f"/proc/{core}") or "Z" in open(f"/proc/{core}/stat").read().split()[2]
