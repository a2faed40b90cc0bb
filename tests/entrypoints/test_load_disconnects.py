"""Plain load on a real engine: 1,000 concurrent greedy streams against a tiny random llama on the
CPU, a fifth of the clients walking away mid-stream. No 5xx, no hang, every stream that stays
gets exactly the non-streamed text of its prompt, and the engine ends with no sequence running or
waiting and every KV block back in the pool."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from srv_process import ServerProcess
from test_server_lifecycle import metric, wait_for

STREAMS = 1000
DISCONNECT_EVERY = 5  # every fifth client asks for 400 tokens and leaves after its first frame
PROMPTS = ["The capital of France is", "One, two, three,", "Hello there", "Q: why? A:"]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> ServerProcess:
    log = tmp_path_factory.mktemp("load") / "server.log"
    srv = ServerProcess(["--model", "tiny_llama", "--load-dummy", "xavier", "--no-enable-log-stats",
                         "kv_cache.num_blocks=2048", "scheduler.max_num_seqs=256", "runtime=cpu"],
                        log_path=log, startup_timeout_s=300)
    yield srv
    srv.stop()


async def _stream(http: httpx.AsyncClient, url: str, i: int) -> tuple[int, str, int]:
    """(status, text, index): index -1 = left on purpose."""
    leaves = i % DISCONNECT_EVERY == 0
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 400 if leaves else MAX_TOKENS,
            "temperature": 0, "stream": True, "ignore_eos": True}
    text, frames = [], 0
    async with http.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            return r.status_code, await r.aread(), i
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            frames += 1
            text.append(json.loads(line[6:])["choices"][0]["text"])
            if leaves:
                return 200, "", -1  # leaves: the context manager closes the connection
    return 200, "".join(text), i


async def _load(url: str) -> list[tuple[int, str, int]]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(180), limits=limits) as http:
        return await asyncio.wait_for(
            asyncio.gather(*(_stream(http, url, i) for i in range(STREAMS))), 240)


def test_a_thousand_streams_with_disconnects(loaded):
    url = loaded.base_url
    whole = {p: httpx.post(url + "/v1/completions", timeout=60, json={
        "prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
    ).json()["choices"][0]["text"] for p in PROMPTS}
    results = asyncio.run(_load(url))
    statuses = [s for s, _, _ in results]
    assert statuses.count(200) == STREAMS, {s for s in statuses if s != 200}
    left = sum(1 for *_, i in results if i == -1)
    assert left == STREAMS // DISCONNECT_EVERY
    for _, text, i in results:
        if i >= 0:
            assert text == whole[PROMPTS[i % len(PROMPTS)]], i
    assert wait_for(lambda: metric(url, "atom:num_requests_running") == 0
                    and metric(url, "atom:num_requests_waiting") == 0, 30)
    assert wait_for(lambda: metric(url, "atom:kv_cache_free_blocks")
                    == metric(url, "atom:kv_cache_total_blocks"), 30)
    assert metric(url, "atom:http_requests_in_flight") == 0
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    print(f"load held: {STREAMS} concurrent streams, {left} disconnected mid-stream, 0 errors")
