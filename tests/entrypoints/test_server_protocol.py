"""The spec's endpoints over real HTTP with the official openai SDK (sync and async) and curl."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import httpx
import openai
import pytest

from srv_process import API_KEY


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)


def test_health_models_and_openapi(server, auth):
    assert httpx.get(server.base_url + "/health").json() == {"status": "ok"}
    models = httpx.get(server.base_url + "/v1/models", headers=auth).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny_llama"
    assert httpx.get(server.base_url + "/schema/openapi.json").status_code == 401
    schema = httpx.get(server.base_url + "/schema/openapi.json", headers=auth).json()
    assert "/v1/chat/completions" in schema["paths"] and "/v1/completions" in schema["paths"]


def test_completion_sync_sdk(client):
    r = client.completions.create(model="tiny_llama", prompt="The capital of France is", max_tokens=8)
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    assert r.choices[0].text == "Hello He" and r.choices[0].finish_reason == "length"
    u = r.usage.model_dump()
    assert u["completion_tokens"] == 8 and u["total_tokens"] == u["prompt_tokens"] + 8
    assert u["latency_s"] >= u["ttft_s"] > 0 and u["tpot_s"] > 0


def test_chat_sync_sdk_stream_equals_whole(client):
    kw = dict(model="tiny_llama", messages=[{"role": "user", "content": "Hello!"}], max_tokens=9,
              temperature=0)
    whole = client.chat.completions.create(**kw)
    assert whole.id.startswith("chatcmpl-") and whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content == ""
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == "Hello Hel"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9


def test_async_sdk_concurrent_streams(server):
    async def run() -> list[str]:
        aclient = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0)
        async def one(i: int) -> str:
            stream = await aclient.completions.create(model="tiny_llama", prompt=f"p{i}", max_tokens=6,
                                                      stream=True)
            return "".join([c.choices[0].text async for c in stream])
        try:
            return await asyncio.gather(*(one(i) for i in range(16)))
        finally:
            await aclient.close()

    assert asyncio.run(run()) == ["Hello "] * 16


def test_n_choices_and_logprobs(client):
    r = client.completions.create(model="tiny_llama", prompt="x", max_tokens=3, n=3, logprobs=2)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    lp = r.choices[0].logprobs
    assert lp.tokens == ["H", "e", "l"] and len(lp.top_logprobs[0]) == 2 and lp.text_offset == [0, 1, 2]
    chat = client.chat.completions.create(model="tiny_llama", messages=[{"role": "user", "content": "a"}],
                                          max_tokens=2, logprobs=True, top_logprobs=1)
    content = chat.choices[0].logprobs.content
    assert [c.token for c in content] == ["H", "e"] and len(content[0].top_logprobs) == 1


def test_echo_stop_and_batch_prompt(client):
    r = client.completions.create(model="tiny_llama", prompt="Q:", max_tokens=8, echo=True, stop=["lo"])
    assert r.choices[0].text == "Q:Hel" and r.choices[0].finish_reason == "stop"
    batch = client.completions.create(model="tiny_llama", prompt=["a", "b"], max_tokens=2)
    assert [c.text for c in sorted(batch.choices, key=lambda c: c.index)] == ["He", "He"]
    ids = client.completions.create(model="tiny_llama", prompt=[72, 105], max_tokens=1)
    assert ids.choices[0].text == "H"


def test_spec_curl_examples(server, auth):
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail("curl is required for the spec's examples")
    hdr = ["-H", f"Authorization: {auth['Authorization']}"]
    out = subprocess.run([curl, "-s", server.base_url + "/v1/chat/completions", "-H",
                          "Content-Type: application/json", *hdr, "-d",
                          json.dumps({"model": "tiny_llama", "messages": [{"role": "user", "content": "Hello!"}],
                                      "max_tokens": 128})], capture_output=True, timeout=60, check=True)
    body = json.loads(out.stdout)
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 128
    out = subprocess.run([curl, "-sN", server.base_url + "/v1/completions", "-H",
                          "Content-Type: application/json", *hdr, "-d",
                          json.dumps({"prompt": "The capital of France is", "max_tokens": 64, "stream": True})],
                         capture_output=True, timeout=60, check=True)
    frames = [f for f in out.stdout.decode().split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    texts = [json.loads(f[6:])["choices"][0]["text"] for f in frames[:-1]]
    assert "".join(texts) == ("Hello " * 11)[:64]


def test_api_key_required(server):
    r = httpx.post(server.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 1})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    bad = httpx.post(server.base_url + "/v1/completions", json={"prompt": "x"},
                     headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and set(bad.json()["error"]) == {"message", "type", "param", "code"}
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert httpx.get(server.base_url + "/health").status_code == 200  # not under /v1


def test_continuous_usage_stats(client):
    chunks = list(client.completions.create(model="tiny_llama", prompt="u", max_tokens=4, stream=True,
                                            stream_options={"include_usage": True,
                                                            "continuous_usage_stats": True}))
    running = [c.usage.completion_tokens for c in chunks if c.choices]
    assert running == sorted(running) and running[-1] == 4 and chunks[-1].usage.completion_tokens == 4


def test_common_client_fields(client):
    """What SDKs and harnesses send: max_completion_tokens, penalties, top_k, user, seed, stop ids."""
    r = client.chat.completions.create(model="tiny_llama", messages=[{"role": "user", "content": "x"}],
                                       max_completion_tokens=3, presence_penalty=0.5, frequency_penalty=0.5,
                                       user="u-1", seed=7, extra_body={"top_k": 5, "repetition_penalty": 1.1})
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    stopped = client.completions.create(model="tiny_llama", prompt="x", max_tokens=20,
                                        extra_body={"stop_token_ids": [111]})  # "o" ends "Hello"
    assert stopped.choices[0].text == "Hello" and stopped.choices[0].finish_reason == "stop"
