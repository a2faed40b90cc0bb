"""The bad-input table: every malformed request gets its status and an OpenAI error body, fast."""
from __future__ import annotations

import httpx
import pytest

LONG = "x" * 3000  # > tiny_llama's 2048-token context with the byte-level tokenizer

CASES = [
    # (path, raw body or json, status, param, code)
    ("/v1/completions", b"{bad json", 400, None, "invalid_json"),
    ("/v1/completions", b"", 400, None, "invalid_body"),
    ("/v1/completions", b"[]", 400, None, "invalid_type"),
    ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature", "invalid_type"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "n": 0}, 400, "n", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, 400, "logprobs", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "presence_penalty": 3}, 400, "presence_penalty", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "frobnicate": 1}, 400, "frobnicate", "unknown_parameter"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 1}}, 400, "logit_bias", "unsupported_parameter"),
    ("/v1/completions", {"prompt": "x", "suffix": "end"}, 400, "suffix", "unsupported_parameter"),
    ("/v1/completions", {"prompt": "x", "min_p": 0.1}, 400, "min_p", "unsupported_parameter"),
    ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options", None),
    ("/v1/completions", {"max_tokens": 3}, 400, "prompt", "missing_required_parameter"),
    ("/v1/completions", {"prompt": [1, "a"]}, 400, "prompt", "invalid_type"),
    ("/v1/completions", {"prompt": [99999]}, 400, "prompt", "invalid_value"),
    ("/v1/completions", {"prompt": LONG}, 400, "prompt", "context_length_exceeded"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 5000}, 400, "max_tokens", "context_length_exceeded"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model", "model_not_found"),
    ("/v1/completions", {"prompt": "x", "seed": 2**70}, 400, "seed", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "top_k": 10**30}, 400, "top_k", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "stop_token_ids": [-1]}, 400, "stop_token_ids[0]", "invalid_value"),
    ("/v1/completions", {"prompt": [2**40]}, 400, "prompt[0]", "invalid_value"),
    ("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1}, 400, "echo", "unsupported_parameter"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages", "missing_required_parameter"),
    ("/v1/chat/completions", {"messages": [{"role": 1}]}, 400, "messages[0].role", "invalid_type"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400,
     "messages[0].role", "invalid_value"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content[0]", "unsupported_content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400,
     "top_logprobs", None),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_object"}}, 400, "response_format",
     "unsupported_parameter"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}]}, 400, "messages",
     "context_length_exceeded"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "model": "nope"}, 404,
     "model", "model_not_found"),
    ("/v1/nothing", {"x": 1}, 404, None, None),
]


@pytest.mark.parametrize("path,body,status,param,code", CASES,
                         ids=[f"{c[0].rsplit('/', 1)[-1]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input(server, auth, path, body, status, param, code):
    headers = {**auth, "Content-Type": "application/json"}
    if isinstance(body, bytes):
        r = httpx.post(server.base_url + path, content=body, headers=headers, timeout=10)
    else:
        r = httpx.post(server.base_url + path, json=body, headers=headers, timeout=10)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code


def test_error_statuses_are_never_500_for_fuzzed_bodies(server, auth):
    """A spread of junk bodies: each is answered 4xx with the OpenAI shape, none hangs."""
    bodies = [b"null", b"1", b'"s"', b"{", b'{"prompt": null}', b'{"prompt": {}}', b'{"prompt": [[]]}',
              b'{"messages": null}', b'{"messages": [{}]}', b'{"prompt": "x", "stop": 5}',
              b'{"prompt": "x", "n": 1e9}', b'{"prompt": "x", "seed": "a"}', b"\xff\xfe"]
    for path in ("/v1/completions", "/v1/chat/completions"):
        for body in bodies:
            r = httpx.post(server.base_url + path, content=body, timeout=10,
                           headers={**auth, "Content-Type": "application/json"})
            assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
            assert "error" in r.json()
