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
