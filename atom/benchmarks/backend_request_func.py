"""One async request function per serving protocol, all timing a request the same way.

Every function sends one request, reads the response as it streams and records when each chunk
carrying generated text arrived: the first gives TTFT, the gaps between the rest give ITL, the last
gives the latency. Timing is per received chunk on purpose — a server that merges N tokens into one
chunk yields one ITL sample, which is what the ITL/TPOT "merge factor" in the report measures.
"""
from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

import aiohttp

from atom.benchmarks.sse import iter_sse_data

AIOHTTP_TIMEOUT = aiohttp.ClientTimeout(total=6 * 60 * 60)


@dataclass
class RequestFuncInput:
    """Everything a request function needs; `model_name` is what the server is asked for when it
    differs from `model` (the path the tokenizer came from)."""

    prompt: str
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    model_name: Optional[str] = None
    logprobs: Optional[int] = None
    extra_body: Optional[dict[str, Any]] = None
    ignore_eos: bool = False
    api_key: Optional[str] = None
    request_id: Optional[str] = None


@dataclass
class RequestFuncOutput:
    """Timings in seconds, measured on the client. `output_tokens` is 0 when the server did not
    say how many it generated; the metrics then count them with the benchmark's tokenizer."""

    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    tpot: float = 0.0
    prompt_len: int = 0
    error: str = ""
    start_time: float = 0.0  # perf_counter when sent: the concurrency timeline needs it
    server_prompt_tokens: int = 0  # usage.prompt_tokens when reported: exposes a tokenizer mismatch


class _Timer:
    """Turns chunk arrival times into TTFT / ITL / latency for one request."""

    def __init__(self, out: RequestFuncOutput) -> None:
        self.out = out
        self.start = time.perf_counter()
        self.last: Optional[float] = None
        out.start_time = self.start

    def token_chunk(self, ts: float) -> None:
        if self.last is None:
            self.out.ttft = ts - self.start
        else:
            self.out.itl.append(ts - self.last)
        self.last = ts

    def finish(self) -> bool:
        """Latency is the arrival of the last text chunk, so TPOT·(n−1) equals the sum of ITLs."""
        if self.last is None:
            self.out.error = "Never received a chunk with generated text; TTFT is undefined."
            self.out.success = False
            return False
        self.out.latency = self.last - self.start
        if self.out.output_tokens > 1:
            self.out.tpot = (self.out.latency - self.out.ttft) / (self.out.output_tokens - 1)
        self.out.success = True
        return True


def _headers(inp: RequestFuncInput) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if inp.api_key:
        headers["Authorization"] = f"Bearer {inp.api_key}"
    if inp.request_id:
        headers["x-request-id"] = inp.request_id
    return headers


def _require_suffix(url: str, suffixes: tuple[str, ...], backend: str) -> None:
    if not url.rstrip("/").endswith(suffixes):
        raise ValueError(f"{backend} backend: the endpoint of {url!r} must end with one of {suffixes}")


async def _http_error(response: aiohttp.ClientResponse) -> str:
    body = await response.text()
    return f"HTTP {response.status} {response.reason}: {body[:500]}"


def _fail(out: RequestFuncOutput) -> None:
    out.success = False
    out.error = "".join(traceback.format_exc(limit=3))


def _chunk_text_completions(obj: dict[str, Any]) -> str:
    choices = obj.get("choices") or []
    return (choices[0].get("text") or "") if choices else ""


def _chunk_text_chat(obj: dict[str, Any]) -> str:
    """Reasoning tokens are generated tokens too: a chunk that only carries reasoning still
    marks a token arrival."""
    choices = obj.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")


EventHandler = Callable[[dict[str, Any], float, "_Timer", RequestFuncOutput], None]


async def _stream_events(inp: RequestFuncInput, session: aiohttp.ClientSession,
                         payload: dict[str, Any], handle: EventHandler) -> RequestFuncOutput:
    """The one streaming loop every SSE protocol shares: POST, fail on a non-200 or an error
    event, hand each JSON event and its arrival time to the protocol's handler, then time."""
    out = RequestFuncOutput(prompt_len=inp.prompt_len)
    timer = _Timer(out)
    try:
        async with session.post(inp.api_url, json=payload, headers=_headers(inp)) as response:
            if response.status != 200:
                out.error = await _http_error(response)
                return out
            async for data, ts in iter_sse_data(response):
                if data == "[DONE]":
                    continue
                obj = json.loads(data)
                if obj.get("error") and not obj.get("choices"):
                    out.error = json.dumps(obj["error"])[:500]
                    return out
                handle(obj, ts, timer, out)
        timer.finish()
    except Exception:
        _fail(out)
    return out


def _openai_handler(chunk_text: Callable[[dict[str, Any]], str]) -> EventHandler:
    def handle(obj: dict[str, Any], ts: float, timer: _Timer, out: RequestFuncOutput) -> None:
        if text := chunk_text(obj):
            timer.token_chunk(ts)
            out.generated_text += text
        usage = obj.get("usage") or {}
        if usage.get("completion_tokens") is not None:
            out.output_tokens = int(usage["completion_tokens"])
            out.server_prompt_tokens = int(usage.get("prompt_tokens") or 0)
    return handle


def _openai_common(inp: RequestFuncInput) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": inp.model_name or inp.model,
        "temperature": 0.0,
        "max_tokens": inp.output_len,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if inp.ignore_eos:
        payload["ignore_eos"] = True
    return payload


async def async_request_openai_completions(
    request_func_input: RequestFuncInput, session: aiohttp.ClientSession
) -> RequestFuncOutput:
    """OpenAI `/v1/completions`, streamed (vllm, openai, sglang, lmdeploy, scalellm)."""
    inp = request_func_input
    _require_suffix(inp.api_url, ("completions", "profile"), "openai-completions")
    payload = _openai_common(inp) | {"prompt": inp.prompt}
    if inp.logprobs is not None:
        payload["logprobs"] = inp.logprobs
    payload.update(inp.extra_body or {})
    return await _stream_events(inp, session, payload, _openai_handler(_chunk_text_completions))


async def async_request_openai_chat_completions(
    request_func_input: RequestFuncInput, session: aiohttp.ClientSession
) -> RequestFuncOutput:
    """OpenAI `/v1/chat/completions`, streamed; the prompt becomes one user message."""
    inp = request_func_input
    _require_suffix(inp.api_url, ("chat/completions", "profile"), "openai-chat")
    payload = _openai_common(inp) | {"messages": [{"role": "user", "content": inp.prompt}]}
    if inp.logprobs is not None:
        payload["logprobs"] = True
        payload["top_logprobs"] = inp.logprobs
    payload.update(inp.extra_body or {})
    return await _stream_events(inp, session, payload, _openai_handler(_chunk_text_chat))


async def async_request_tgi(
    request_func_input: RequestFuncInput, session: aiohttp.ClientSession
) -> RequestFuncOutput:
    """Text Generation Inference `POST /generate_stream`: one SSE event per token; the last
    carries `details.generated_tokens`. TGI has no ignore-EOS switch, so output lengths may be
    shorter than asked."""
    inp = request_func_input
    _require_suffix(inp.api_url, ("generate_stream",), "tgi")
    params: dict[str, Any] = {"max_new_tokens": inp.output_len, "do_sample": False, "details": True}
    payload: dict[str, Any] = {"inputs": inp.prompt, "parameters": params}
    params.update(inp.extra_body or {})
    return await _stream_events(inp, session, payload, _tgi_event)


def _tgi_event(obj: dict[str, Any], ts: float, timer: _Timer, out: RequestFuncOutput) -> None:
    token = obj.get("token") or {}
    if not token.get("special", False):
        timer.token_chunk(ts)
        out.generated_text += token.get("text") or ""
    details = obj.get("details") or {}
    if details.get("generated_tokens") is not None:
        out.output_tokens = int(details["generated_tokens"])
    if obj.get("generated_text") is not None:
        out.generated_text = obj["generated_text"]


def _append_text(accumulated: str, new: str) -> str:
    """TRT-LLM sends a delta or, depending on the ensemble, the whole text so far."""
    if accumulated and new.startswith(accumulated):
        return new
    return accumulated + new


async def async_request_trt_llm(
    request_func_input: RequestFuncInput, session: aiohttp.ClientSession
) -> RequestFuncOutput:
    """TensorRT-LLM (Triton) `POST /v2/models/<ensemble>/generate_stream`; events carry
    `text_output`. `min_length` pins the output length when EOS is to be ignored."""
    inp = request_func_input
    _require_suffix(inp.api_url, ("generate_stream",), "tensorrt-llm")
    payload: dict[str, Any] = {
        "accumulate_tokens": True,
        "text_input": inp.prompt,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": inp.output_len,
        "stream": True,
    }
    if inp.ignore_eos:
        payload["min_length"] = inp.output_len
    payload.update(inp.extra_body or {})
    return await _stream_events(inp, session, payload, _trt_event)


def _trt_event(obj: dict[str, Any], ts: float, timer: _Timer, out: RequestFuncOutput) -> None:
    if piece := obj.get("text_output"):
        timer.token_chunk(ts)
        out.generated_text = _append_text(out.generated_text, piece)


def _mii_text_and_tokens(body: Any) -> tuple[str, int]:
    """MII answers in several shapes across versions: a list of responses, `{"text": [...]}`,
    `{"response": [...]}` or OpenAI-style `choices`."""
    if isinstance(body, dict) and body.get("choices"):
        usage = body.get("usage") or {}
        return body["choices"][0].get("text", ""), int(usage.get("completion_tokens") or 0)
    if isinstance(body, dict):
        body = body.get("response", body.get("text", body.get("generated_text", "")))
    if isinstance(body, list):
        body = body[0] if body else ""
    if isinstance(body, dict):
        return str(body.get("generated_text", "")), int(body.get("generated_length") or 0)
    return str(body), 0


async def async_request_deepspeed_mii(
    request_func_input: RequestFuncInput, session: aiohttp.ClientSession
) -> RequestFuncOutput:
    """DeepSpeed-MII RESTful API (`POST /mii/<deployment>`), which does not stream: the whole
    answer arrives at once, so the client-observed TTFT equals the latency and ITL is empty."""
    inp = request_func_input
    payload: dict[str, Any] = {
        "prompts": [inp.prompt],
        "max_new_tokens": inp.output_len,
        "do_sample": False,
    }
    if inp.ignore_eos:
        payload["ignore_eos"] = True
    payload.update(inp.extra_body or {})
    out = RequestFuncOutput(prompt_len=inp.prompt_len)
    timer = _Timer(out)
    try:
        async with session.post(inp.api_url, json=payload, headers=_headers(inp)) as response:
            if response.status != 200:
                out.error = await _http_error(response)
                return out
            body = await response.json(content_type=None)
            timer.token_chunk(time.perf_counter())
        out.generated_text, out.output_tokens = _mii_text_and_tokens(body)
        timer.finish()
    except Exception:
        _fail(out)
    return out


RequestFunc = Callable[[RequestFuncInput, aiohttp.ClientSession], Awaitable[RequestFuncOutput]]

ASYNC_REQUEST_FUNCS: dict[str, RequestFunc] = {
    "tgi": async_request_tgi,
    "vllm": async_request_openai_completions,
    "lmdeploy": async_request_openai_completions,
    "deepspeed-mii": async_request_deepspeed_mii,
    "openai": async_request_openai_completions,
    "openai-chat": async_request_openai_chat_completions,
    "tensorrt-llm": async_request_trt_llm,
    "scalellm": async_request_openai_completions,
    "sglang": async_request_openai_completions,
}

# Where each protocol listens when --endpoint is left at its default.
DEFAULT_ENDPOINTS: dict[str, str] = {
    "tgi": "/generate_stream",
    "tensorrt-llm": "/v2/models/ensemble/generate_stream",
    "deepspeed-mii": "/mii/benchmark",
    "openai-chat": "/v1/chat/completions",
}
