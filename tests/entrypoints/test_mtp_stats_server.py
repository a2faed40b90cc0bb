"""`/debug/mtp_stats` and the `atom:mtp_*` metrics over a real server on loopback: the tiny
model on the CPU with n-gram speculation under forced acceptance (so every decoding step
verifies k drafts whatever the random weights say)."""
from __future__ import annotations

import asyncio
from typing import Iterator, Optional

import aiohttp
import httpx
import pytest

from atom.benchmarks.spec_decode_stats import fetch_mtp_stats, spec_decode_delta
from srv_process import API_KEY, MODEL_SERVERS, ServerProcess

AUTH = {"Authorization": f"Bearer {API_KEY}"}

K = 3
LENGTH = 3.0  # forced: accepts 2 of the 3 drafts at every verify step


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("mtp_logs") / "server.log"
    srv = ServerProcess(MODEL_SERVERS["tiny"] + [
        "--method", "ngram", "--num-speculative-tokens", str(K),
        "--spec-decode-acceptance-length", str(LENGTH), "--enable-log-stats",
        "--api-key", API_KEY], log_path=log)
    yield srv
    srv.stop()


def _benchmark_fetch(url: str, key: Optional[str]) -> Optional[dict]:
    async def fetch() -> Optional[dict]:
        async with aiohttp.ClientSession() as session:
            return await fetch_mtp_stats(session, url, key)
    return asyncio.run(fetch())


def test_the_statistics_endpoint_and_metrics_count_the_servers_drafts(spec_server):
    url = spec_server.base_url
    before = httpx.get(url + "/debug/mtp_stats", headers=AUTH, timeout=10).json()
    assert before["enabled"] is True and before["method"] == "ngram"
    assert before["num_speculative_tokens"] == K
    r = httpx.post(url + "/v1/completions", headers=AUTH, timeout=120, json={
        "model": "tiny_llama", "prompt": "Hello world", "max_tokens": 40, "temperature": 0,
        "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 40
    after = httpx.get(url + "/debug/mtp_stats", headers=AUTH, timeout=10).json()
    drafted = after["total_draft_tokens"] - before["total_draft_tokens"]
    accepted = after["total_accepted_tokens"] - before["total_accepted_tokens"]
    forwards = after["total_forwards"] - before["total_forwards"]
    assert drafted >= K * (40 // int(LENGTH) - 2) and accepted > 0
    assert accepted == 2 * forwards  # the forced schedule at length 3.0 keeps exactly 2
    assert after["per_position_acceptance"] == [1.0, 1.0, 0.0]
    assert after["average_tokens_per_forward"] == pytest.approx(LENGTH)
    assert after["acceptance_rate"] == pytest.approx(after["total_accepted_tokens"]
                                                     / after["total_draft_tokens"])
    run = spec_decode_delta(before, _benchmark_fetch(url, API_KEY))  # what benchmark_serving prints
    assert (run.draft_tokens, run.accepted_tokens) == (drafted, accepted)
    assert run.accept_length == pytest.approx(LENGTH)
    metrics = httpx.get(url + "/metrics", headers=AUTH, timeout=10).text
    assert "atom:mtp_average_tokens_per_forward 3.0" in metrics
    assert f"atom:mtp_draft_tokens_total {float(after['total_draft_tokens'])}" in metrics
    assert 'atom:mtp_per_position_acceptance_rate{position="2"} 0.0' in metrics
    assert _benchmark_fetch(url, None) is None  # guarded by the server's API key
    assert "MEANINGLESS" in spec_server.log_tail(200_000)
