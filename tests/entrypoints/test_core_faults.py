"""Faults of the processes themselves: a stopped engine core is reported (health 503 and a growing
silence metric) and recovers when it resumes; a killed API process takes its core with it."""
from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from srv_process import ServerProcess, _gone, synthetic_args
from test_server_lifecycle import metric, wait_for

SILENCE_S = 1.0


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> ServerProcess:
    log = tmp_path_factory.mktemp("faults") / "server.log"
    args = synthetic_args()  # its overrides run up to the last flag: this one joins them
    args.insert(-1, f"server.core_silence_timeout_s={SILENCE_S}")
    srv = ServerProcess(args, log_path=log)
    yield srv
    srv.stop()


def test_idle_core_is_healthy_past_the_silence_limit(watched):
    """An idle core sends heartbeats, so silence longer than the limit never comes from idling."""
    time.sleep(3 * SILENCE_S)
    assert httpx.get(watched.base_url + "/health", timeout=5).status_code == 200
    assert metric(watched.base_url, "atom:engine_core_silence_seconds") < SILENCE_S


def test_stopped_core_turns_health_503_and_recovers(watched):
    url = watched.base_url
    with httpx.Client(timeout=30) as c, c.stream(
            "POST", url + "/v1/completions",
            json={"prompt": "x", "max_tokens": 400, "stream": True, "ignore_eos": True}) as r:
        lines = r.iter_lines()
        next(lines)
        core = watched.core_pid()
        os.kill(core, signal.SIGSTOP)
        try:
            assert wait_for(lambda: httpx.get(url + "/health", timeout=5).status_code == 503,
                            4 * SILENCE_S + 5)
            body = httpx.get(url + "/health", timeout=5).json()
            assert body["error"]["code"] == "engine_stalled"
            assert metric(url, "atom:engine_core_silence_seconds") > SILENCE_S
        finally:
            os.kill(core, signal.SIGCONT)
        assert wait_for(lambda: httpx.get(url + "/health", timeout=5).status_code == 200, 10)
        frames = [line for line in lines if line.startswith("data: ")]
        assert frames[-1] == "data: [DONE]"  # the stream in flight finished after the pause


def test_killed_api_process_takes_its_core_with_it(tmp_path):
    srv = ServerProcess(synthetic_args(), log_path=tmp_path / "server.log")
    try:
        core = srv.core_pid()
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(10)
        assert _gone(core, 10), "the engine core outlived its API process"
    finally:
        srv.stop()


def test_a_tensor_parallel_server_serves_and_stops_with_its_ranks(tmp_path):
    """tp=2 behind the server: the engine core process starts one worker process per rank; the
    streamed and whole greedy answers agree, and SIGTERM leaves no rank behind."""
    srv = ServerProcess(["--model", "tiny_llama", "--load-dummy", "xavier", "--no-enable-log-stats",
                         "--tensor-parallel-size", "2", "kv_cache.num_blocks=64", "runtime=cpu"],
                        log_path=tmp_path / "server.log", startup_timeout_s=240)
    try:
        core = srv.core_pid()
        ranks = [int(p) for p in open(f"/proc/{core}/task/{core}/children").read().split()]
        assert len(ranks) == 2
        body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                "ignore_eos": True}
        whole = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=60).json()
        text = whole["choices"][0]["text"]
        with httpx.stream("POST", srv.base_url + "/v1/completions", json={**body, "stream": True},
                          timeout=60) as r:
            import json

            streamed = "".join(json.loads(line[6:])["choices"][0]["text"] for line in r.iter_lines()
                               if line.startswith("data: {"))
        assert streamed == text and whole["usage"]["completion_tokens"] == 8
    finally:
        srv.stop()
    assert srv.graceful and all(_gone(p) for p in ranks)


def test_a_data_parallel_server_spreads_requests_over_its_replicas(tmp_path):
    """dp=2: two engine cores behind one API process, each with its own KV pool; concurrent
    greedy answers agree and the stats are the sum (how requests split over the replicas is
    tested in test_engine_client.py)."""
    import asyncio

    srv = ServerProcess(["--model", "tiny_llama", "--load-dummy", "xavier", "--no-enable-log-stats",
                         "--data-parallel-size", "2", "kv_cache.num_blocks=64", "runtime=cpu"],
                        log_path=tmp_path / "server.log", startup_timeout_s=240)
    try:
        cores = [int(p) for p in open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read()
                 .split() if b"resource_tracker" not in open(f"/proc/{p}/cmdline", "rb").read()]
        assert len(cores) == 2
        assert metric(srv.base_url, "atom:kv_cache_total_blocks") == 2 * 64
        body = {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0,
                "ignore_eos": True}

        async def many() -> list[str]:
            async with httpx.AsyncClient(timeout=60) as http:
                rs = await asyncio.gather(*(http.post(srv.base_url + "/v1/completions", json=body)
                                            for _ in range(8)))
            return [r.json()["choices"][0]["text"] for r in rs]

        texts = asyncio.run(many())
        assert len(set(texts)) == 1 and texts[0]
        assert metric(srv.base_url, "atom:generation_tokens_total") == 8 * 16
    finally:
        srv.stop()
    assert srv.graceful and all(_gone(p) for p in cores)
