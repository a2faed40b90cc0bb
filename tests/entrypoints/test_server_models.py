"""Real engine cores behind the server: a tiny random llama (dummy weights) and the embedded default
model (SmolLM2-135M-Instruct). The openai SDK, sync and async, streamed and whole, must agree on
greedy text; a disconnect frees the real KV blocks; a killed core turns into 503s and failed streams."""
from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import openai
import pytest

from srv_process import ServerProcess
from test_server_lifecycle import metric, wait_for


def greedy_pair(client: openai.OpenAI, model: str, **kw) -> tuple[str, str, str, str]:
    chat = dict(model=model, messages=[{"role": "user", "content": "What is the capital of France?"}],
                temperature=0, **kw)
    whole = client.chat.completions.create(**chat).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        stream=True, **chat) if c.choices)
    comp = dict(model=model, prompt="The capital of France is", temperature=0, **kw)
    c_whole = client.completions.create(**comp).choices[0].text
    c_streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **comp))
    return whole, streamed, c_whole, c_streamed


async def async_greedy(base_url: str, model: str, n: int, **kw) -> list[str]:
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    try:
        async def one() -> str:
            stream = await client.completions.create(model=model, prompt="The capital of France is",
                                                     temperature=0, stream=True, **kw)
            return "".join([c.choices[0].text async for c in stream])
        whole = await client.completions.create(model=model, prompt="The capital of France is",
                                                temperature=0, **kw)
        return [whole.choices[0].text] + list(await asyncio.gather(*(one() for _ in range(n))))
    finally:
        await client.close()


@pytest.fixture(scope="module")
def tiny(model_servers) -> ServerProcess:
    return model_servers["tiny"].wait_healthy()


def test_tiny_random_model_sdk(tiny):
    client = openai.OpenAI(base_url=tiny.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    whole, streamed, c_whole, c_streamed = greedy_pair(client, "tiny_llama", max_tokens=12)
    assert whole == streamed and c_whole == c_streamed and len(c_whole) > 0
    texts = asyncio.run(async_greedy(tiny.base_url, "tiny_llama", 4, max_tokens=12))
    assert texts == [c_whole] * 5  # batched greedy decoding agrees with the lone request


def test_tiny_disconnect_frees_real_kv_blocks(tiny):
    url = tiny.base_url
    assert wait_for(lambda: metric(url, "atom:num_requests_running") == 0)
    start_free = metric(url, "atom:kv_cache_free_blocks")
    assert start_free > 0
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", url + "/v1/completions",
                      json={"prompt": "a" * 300, "max_tokens": 1500, "stream": True, "ignore_eos": True}) as r:
            lines = r.iter_lines()
            for n, _ in enumerate(lines):
                if n == 10:
                    break
            assert metric(url, "atom:kv_cache_free_blocks") < start_free
    assert wait_for(lambda: metric(url, "atom:kv_cache_free_blocks") == start_free, 20)
    assert metric(url, "atom:num_requests_running") == 0


def test_tiny_extreme_sampling_values_keep_the_engine_alive(tiny):
    """Every in-range extreme is served, and the core survives all of them."""
    client = openai.OpenAI(base_url=tiny.base_url + "/v1", api_key="none", max_retries=0, timeout=60)
    for extra in ({"temperature": 1e-30}, {"temperature": 1e4}, {"top_p": 1e-9}, {"top_k": 1},
                  {"top_k": 2**31 - 1}, {"presence_penalty": 2, "frequency_penalty": -2},
                  {"repetition_penalty": 0.01}, {"repetition_penalty": 10}, {"seed": -(2**63)},
                  {"seed": 2**63 - 257, "n": 3, "temperature": 1.0}, {"stop": ["", "a" * 256]},
                  {"stop_token_ids": [2**31 - 1]}, {"logprobs": 20}):
        params = {k: v for k, v in extra.items() if k not in ("top_k", "repetition_penalty", "stop_token_ids")}
        body = {k: v for k, v in extra.items() if k in ("top_k", "repetition_penalty", "stop_token_ids")}
        r = client.completions.create(model="tiny_llama", prompt="hi", max_tokens=3, extra_body=body, **params)
        assert r.choices and r.usage.completion_tokens >= 1, extra
    assert httpx.get(tiny.base_url + "/health", timeout=10).status_code == 200


def test_tiny_profile_without_dir_is_400(tiny):
    r = httpx.post(tiny.base_url + "/start_profile", timeout=10)
    assert r.status_code == 400 and "torch-profiler-dir" in r.json()["error"]["message"]


def test_tiny_out_of_vocabulary_request_fails_alone(tiny):
    """Token ids past the model's vocabulary (tiny_llama has 512) are refused with a 400 (by the
    API process, and by the core if they got there), while four greedy streams beside it get
    exactly the lone request's text."""
    client = openai.OpenAI(base_url=tiny.base_url + "/v1", api_key="none", max_retries=0, timeout=60)
    lone = client.completions.create(model="tiny_llama", prompt="The capital of France is",
                                     temperature=0, max_tokens=12).choices[0].text

    async def together() -> tuple[list[str], httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as http:
            bad = http.post(tiny.base_url + "/v1/completions",
                            json={"prompt": [5, 512 + 7, 9], "max_tokens": 4})
            texts, refused = await asyncio.gather(
                async_greedy(tiny.base_url, "tiny_llama", 4, max_tokens=12), bad)
            return texts, refused

    texts, refused = asyncio.run(together())
    assert refused.status_code == 400, refused.text
    assert "512" in refused.json()["error"]["message"]
    assert texts == [lone] * 5
    assert httpx.get(tiny.base_url + "/health", timeout=10).status_code == 200
    assert wait_for(lambda: metric(tiny.base_url, "atom:num_requests_running") == 0)
    assert wait_for(lambda: metric(tiny.base_url, "atom:kv_cache_free_blocks")
                    == metric(tiny.base_url, "atom:kv_cache_total_blocks"))


def test_tiny_dead_engine_fails_streams_and_health(tiny):
    """Runs last in this module: it kills the engine core."""
    client = openai.OpenAI(base_url=tiny.base_url + "/v1", api_key="none", max_retries=0, timeout=60)
    it = iter(client.completions.create(model="tiny_llama", prompt="d", max_tokens=1500, stream=True,
                                        extra_body={"ignore_eos": True}))
    next(it)
    os.kill(tiny.core_pid(), signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(openai.APIError):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 10  # ended with an error, not a hang
    r = httpx.get(tiny.base_url + "/health", timeout=10)
    assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable_error"
    r = httpx.post(tiny.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_dead"
    r = httpx.post(tiny.base_url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "x"}]}, timeout=10)
    assert r.status_code == 503


@pytest.fixture(scope="module")
def default_model(model_servers) -> ServerProcess:
    return model_servers["default"].wait_healthy()


def test_default_model_sdk(default_model):
    url = default_model.base_url
    name = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    assert name == "HuggingFaceTB/SmolLM2-135M-Instruct"
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    whole, streamed, c_whole, c_streamed = greedy_pair(client, name, max_tokens=8)
    assert whole == streamed and "Paris" in whole
    assert c_whole == c_streamed and c_whole.strip()
    texts = asyncio.run(async_greedy(url, name, 2, max_tokens=6))
    assert len(set(texts)) == 1


def test_default_model_profiling_over_http(default_model):
    """POST /start_profile, a request, POST /stop_profile: the real engine writes its trace under
    <dir>/rank_0/."""
    url = default_model.base_url
    assert httpx.post(url + "/start_profile", timeout=120).status_code == 200
    httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=120)
    r = httpx.post(url + "/stop_profile", timeout=300)
    assert r.status_code == 200, r.text
    traces = list((default_model.profiler_dir / "rank_0").glob("*"))
    assert traces and all(t.stat().st_size > 0 for t in traces)


def test_benchmark_against_the_served_default_needs_no_tokenizer_flag(default_model, tmp_path):
    """The README's benchmark line against the served default model: the tokenizer is resolved
    from the served name (the embedded GGUF, as the server resolves it), so the prompts the
    benchmark counts are the ones the server counts, and no mismatch is reported."""
    import subprocess
    import sys

    from srv_process import REPO

    r = subprocess.run(
        [sys.executable, "-m", "atom.benchmarks.benchmark_serving", "--backend", "vllm",
         "--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--base-url", default_model.base_url,
         "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "4",
         "--num-prompts", "4", "--disable-tqdm"],
        cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in r.stdout.splitlines())}
    assert lines["Successful requests"] == "4"
    assert lines["Total input tokens"] == lines["Total input tokens (server count)"] == "128"
    assert "WARNING" not in r.stdout
