"""Each backend's request function against a local server speaking its protocol."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest

from atom.benchmarks.backend_request_func import (
    ASYNC_REQUEST_FUNCS, RequestFuncInput, RequestFuncOutput, async_request_deepspeed_mii,
    async_request_openai_chat_completions, async_request_openai_completions, async_request_tgi,
    async_request_trt_llm,
)
from atom.benchmarks.sse import SSEDecoder
from bench_fakes import Behavior, FakeServer

N = 8
STREAMING = [
    ("completions", async_request_openai_completions),
    ("chat", async_request_openai_chat_completions),
    ("tgi", async_request_tgi),
    ("trt", async_request_trt_llm),
]


def _call(func, server: FakeServer, output_len: int = N, **kw) -> RequestFuncOutput:
    inp = RequestFuncInput(prompt="hello world", api_url=server.base_url + server.path,
                           prompt_len=2, output_len=output_len, model="fake-model", **kw)

    async def go() -> RequestFuncOutput:
        async with aiohttp.ClientSession() as session:
            return await func(inp, session)

    return asyncio.run(go())


def _expected_text(n: int) -> str:
    return "".join(f"tok{i} " for i in range(n))


@pytest.mark.parametrize("protocol,func", STREAMING)
def test_streaming_backend_times_every_chunk(protocol, func):
    with FakeServer(protocol, Behavior(token_interval_s=0.003)) as server:
        out = _call(func, server, ignore_eos=True)
    assert out.success, out.error
    assert out.generated_text == _expected_text(N)
    assert len(out.itl) == N - 1
    assert 0 < out.ttft <= out.latency
    assert out.latency == pytest.approx(out.ttft + sum(out.itl), abs=1e-6)
    # The server sleeps 3 ms per token; single gaps may read 0 when two frames share a TCP read.
    assert sum(out.itl) >= 0.003 * (N - 1) * 0.9
    if protocol != "trt":  # TRT-LLM reports no token count; the metrics tokenize instead
        assert out.output_tokens == N
        assert out.tpot == pytest.approx((out.latency - out.ttft) / (N - 1))


def test_openai_payload_follows_the_protocol():
    with FakeServer("completions") as server:
        _call(async_request_openai_completions, server, ignore_eos=True, model_name="served",
              extra_body={"top_p": 0.5})
        payload = server.record.payloads[0]
    assert payload["model"] == "served" and payload["prompt"] == "hello world"
    assert payload["stream"] is True and payload["stream_options"] == {"include_usage": True}
    assert payload["max_tokens"] == N and payload["ignore_eos"] is True and payload["top_p"] == 0.5


def test_chat_sends_one_user_message():
    with FakeServer("chat") as server:
        _call(async_request_openai_chat_completions, server)
        payload = server.record.payloads[0]
    assert payload["messages"] == [{"role": "user", "content": "hello world"}]


def test_merged_chunks_give_fewer_itl_samples():
    with FakeServer("completions", Behavior(tokens_per_chunk=4)) as server:
        out = _call(async_request_openai_completions, server)
    assert out.success and out.output_tokens == N
    assert len(out.itl) == N // 4 - 1  # one sample per received chunk


def test_trt_llm_accepts_cumulative_text_and_pins_length():
    with FakeServer("trt", Behavior(trt_cumulative=True)) as server:
        out = _call(async_request_trt_llm, server, ignore_eos=True)
        payload = server.record.payloads[0]
    assert out.generated_text == _expected_text(N)
    assert payload["min_length"] == N and payload["text_input"] == "hello world"


def test_tgi_payload():
    with FakeServer("tgi") as server:
        _call(async_request_tgi, server)
        payload = server.record.payloads[0]
    assert payload["inputs"] == "hello world" and payload["parameters"]["max_new_tokens"] == N


def test_deepspeed_mii_is_one_chunk():
    with FakeServer("mii", Behavior(token_interval_s=0.002)) as server:
        out = _call(async_request_deepspeed_mii, server)
    assert out.success, out.error
    assert out.generated_text == _expected_text(N) and out.output_tokens == N
    assert out.itl == [] and out.ttft == out.latency >= 0.016


@pytest.mark.parametrize("protocol,func", STREAMING + [("mii", async_request_deepspeed_mii)])
def test_http_error_is_a_failed_request(protocol, func):
    with FakeServer(protocol, Behavior(fail_status=500)) as server:
        out = _call(func, server)
    assert not out.success and "500" in out.error


def test_wrong_endpoint_is_refused():
    with FakeServer("tgi") as server:
        inp = RequestFuncInput("p", server.base_url + "/v1/completions", 1, 1, "m")
        with pytest.raises(ValueError, match="generate_stream"):
            asyncio.run(async_request_tgi(inp, None))  # type: ignore[arg-type]


def test_every_spec_backend_key_is_registered():
    assert set(ASYNC_REQUEST_FUNCS) == {"tgi", "vllm", "lmdeploy", "deepspeed-mii", "openai",
                                         "openai-chat", "tensorrt-llm", "scalellm", "sglang"}
    for key in ("vllm", "openai", "lmdeploy", "scalellm", "sglang"):
        assert ASYNC_REQUEST_FUNCS[key] is async_request_openai_completions


def test_sse_decoder_handles_split_frames_crlf_and_comments():
    dec = SSEDecoder()
    got = list(dec.feed(b": keep-alive\r\n\r\ndata: {\"a\""))
    got += list(dec.feed(b": 1}\r\n\r\ndata:[DONE]\n\nevent: x\ndata: tail"))
    got += list(dec.close())
    assert got == ['{"a": 1}', "[DONE]", "tail"]
