"""vLLM's /tokenize and /detokenize: the served tokenizer (here the byte-level stand-in of the
synthetic server's dummy-weight model), the server's own chat template, its auth and its errors."""
from __future__ import annotations

import httpx


def test_tokenize_and_detokenize_round_trip(server, auth):
    url = server.base_url
    r = httpx.post(url + "/tokenize", json={"prompt": "Hello"}, headers=auth, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == [72, 101, 108, 108, 111] and body["count"] == 5
    assert body["max_model_len"] > 0
    r = httpx.post(url + "/detokenize", json={"tokens": body["tokens"]}, headers=auth, timeout=10)
    assert r.status_code == 200 and r.json() == {"prompt": "Hello"}


def test_tokenize_messages_counts_the_prompt_the_chat_endpoint_runs(server, auth):
    url = server.base_url
    messages = [{"role": "user", "content": "Hi there"}]
    count = httpx.post(url + "/tokenize", json={"messages": messages}, headers=auth,
                       timeout=10).json()["count"]
    chat = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1},
                      headers=auth, timeout=30).json()
    assert count == chat["usage"]["prompt_tokens"] > len("Hi there")


def test_tokenize_refuses_what_the_api_refuses(server, auth):
    url = server.base_url
    assert httpx.post(url + "/tokenize", json={"prompt": "x"}, timeout=10).status_code == 401
    r = httpx.post(url + "/tokenize", json={"prompt": "x", "model": "nope"}, headers=auth, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = httpx.post(url + "/tokenize", json={}, headers=auth, timeout=10)
    assert r.status_code == 400
    r = httpx.post(url + "/detokenize", json={"tokens": [1, 10**9]}, headers=auth, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens[1]"
