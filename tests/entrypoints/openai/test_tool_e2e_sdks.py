"""End to end: the scripted engine replays each format's answer through the real server; the
`openai` SDK gets the same tool_calls and content streamed and not, and the `anthropic` SDK the
same on /v1/messages. Every server resolves its format from a real chat template (`auto`).
"""
from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_TESTS / "templates"))
sys.path.insert(0, str(_TESTS / "entrypoints"))
import llama_cpp_templates  # noqa: E402
import tool_wire  # noqa: E402
from srv_process import free_port  # noqa: E402

from atom.config.flags import _fmt  # noqa: E402

import anthropic  # noqa: E402  (test extras: a missing client must fail, not skip)
import openai  # noqa: E402
import uvicorn  # noqa: E402

pytestmark = pytest.mark.slow

CALL = ("get_weather", {"city": "Paris", "days": 3})
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}}}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather for a city.",
                    "input_schema": TOOLS[0]["function"]["parameters"]}]

# format -> (real template, what the script opens with: reasoning then its end marker, and the
# whitespace after the marker, which is content)
CASES = {
    "qwen": ("Qwen3.5-4B", "Paris weather.</think>", "\n\n"),
    "hermes": ("Qwen-Qwen3-0.6B", "<think>Paris weather.</think>", "\n\n"),
    "glm": ("GLM-4.7-Flash", "Paris weather.</think>", ""),
    "minimax": ("MiniMax-M2", "Paris weather.</think>", "\n"),
    "dsml": ("deepseek-ai-DeepSeek-V3.2", "", ""),
    "kimi": ("moonshotai-Kimi-K2", "", ""),
    "kimi_k3": ("Kimi-K3", "Paris weather.<|close|>think<|sep|>", ""),
    "llama3_json": ("meta-llama-Llama-3.1-8B-Instruct", "", ""),
}


# Issue 16's shapes on the real server: name -> (template, script, (content, reasoning, calls)).
# Qwen3.5's prompt opens the think block and the model calls before closing it; R1's template
# ends its generation prompt with `<think>\n`, so the answer starts inside the block.
SHAPES = {
    "call_in_open_think": ("Qwen3.5-4B", "Paris weather." + tool_wire.call_block("qwen", [CALL])[0]
                           + "\nDone.", ("\nDone.", "Paris weather.", [CALL])),
    "r1_prompt_opened": ("llama-cpp-deepseek-r1", "The plan.</think>The answer.",
                         ("The answer.", "The plan.", [])),
}


def script(fmt: str) -> tuple[str, tool_wire.Answer]:
    _, reasoning, gap = CASES[fmt]
    ans = tool_wire.answer(fmt, [gap + "Let me check.\n", [CALL], "\nDone."])
    return reasoning + ans.wire, ans


class LoopbackServer:
    """The real app (build_app: tokenizer, scripted engine core in its own process, Litestar)
    under uvicorn on a loopback port, in a thread of this process: the API side's imports are
    paid once for all formats rather than once per server."""

    def __init__(self, cfg) -> None:
        from atom.builder import build_app
        from atom.core_process import run_core

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        app = build_app(cfg, run_core)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", access_log=False))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)


@pytest.fixture(scope="module")
def servers():
    templates = llama_cpp_templates.template_dir()

    def config(template, text):
        from atom.entrypoints.openai_server import config_from_argv

        return config_from_argv([
            "--model", "tiny_llama", "--load-dummy", "--engine-source", "scripted",
            f"server.script_text={_fmt(text)}", "server.script_tokens_per_s=0",
            f"format.chat_template={templates / (template + '.jinja')}",
            "kv_cache.num_blocks=256", "--no-enable-log-stats"])

    # Hydra composes one at a time
    configs = {fmt: config(CASES[fmt][0], script(fmt)[0]) for fmt in CASES}
    configs.update({name: config(t, text) for name, (t, text, _) in SHAPES.items()})
    from transformers import AutoTokenizer  # noqa: F401  (lazy imports are not thread-safe)
    with ThreadPoolExecutor(len(configs)) as pool:
        futures = {name: pool.submit(LoopbackServer, cfg) for name, cfg in configs.items()}
        try:
            yield {fmt: fut.result() for fmt, fut in futures.items()}
        finally:
            for fut in futures.values():
                if fut.exception() is None:
                    fut.result().stop()


def _expected_reasoning(fmt):
    return "Paris weather." if CASES[fmt][1] else None


def _openai_both(srv):
    """(whole, streamed) as (content, reasoning, calls with their arguments string, reason)."""
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="x", max_retries=0, timeout=60)
    kw = dict(model="tiny_llama", messages=[{"role": "user", "content": "Weather in Paris?"}],
              tools=TOOLS, max_tokens=600)
    whole = client.chat.completions.create(**kw).choices[0]
    msg = whole.message
    first = (msg.content or "", getattr(msg, "reasoning_content", None) or "",
             [(c.function.name, c.function.arguments) for c in msg.tool_calls or []],
             whole.finish_reason)
    content, reasoning, acc, reasons = "", "", {}, []
    for chunk in client.chat.completions.create(stream=True, **kw):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        for tc in delta.tool_calls or []:
            slot = acc.setdefault(tc.index, {"name": None, "arguments": ""})
            slot["name"] = slot["name"] or (tc.function.name if tc.function else None)
            slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
        if chunk.choices[0].finish_reason:
            reasons.append(chunk.choices[0].finish_reason)
    calls = [(s["name"], s["arguments"]) for _, s in sorted(acc.items())]
    assert len(reasons) == 1
    return first, (content, reasoning, calls, reasons[0])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_issue16_shapes_read_alike_streamed_and_not(servers, name):
    whole, streamed = _openai_both(servers[name])
    assert whole == streamed
    content, reasoning, calls = SHAPES[name][2]
    assert (whole[0], whole[1], [(n, json.loads(a)) for n, a in whole[2]]) == \
        (content, reasoning, calls)
    assert whole[3] == ("tool_calls" if calls else "stop")


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_openai_sdk_stream_and_whole_agree(servers, fmt):
    _, ans = script(fmt)
    whole, streamed = _openai_both(servers[fmt])
    content, reasoning, calls, reason = whole
    assert [(n, json.loads(a)) for n, a in calls] == [CALL] and reason == "tool_calls"
    assert content == ans.content
    assert (reasoning or None) == _expected_reasoning(fmt)
    assert streamed[0] == content and (streamed[1] or None) == _expected_reasoning(fmt)
    assert [(n, json.loads(a)) for n, a in streamed[2]] == [CALL] and streamed[3] == "tool_calls"


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_anthropic_sdk_stream_and_whole_agree(servers, fmt):
    srv = servers[fmt]
    _, ans = script(fmt)
    client = anthropic.Anthropic(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
    kw = dict(model="tiny_llama", max_tokens=600, tools=ANTHROPIC_TOOLS,
              messages=[{"role": "user", "content": "Weather in Paris?"}])
    whole = client.messages.create(**kw)
    streamed = _streamed_message(client, kw)
    for msg in (whole, streamed):
        kinds = [b.type for b in msg.content]
        uses = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
        text = "".join(b.text for b in msg.content if b.type == "text")
        thinking = "".join(b.thinking for b in msg.content if b.type == "thinking")
        assert uses == [CALL] and msg.stop_reason == "tool_use", kinds
        assert text == ans.content
        assert (thinking or None) == _expected_reasoning(fmt)


def _streamed_message(client, kw):
    with client.messages.stream(**kw) as stream:
        return stream.get_final_message()


def test_anthropic_tool_choice_none_keeps_the_answer(servers):
    srv = servers["qwen"]
    client = anthropic.Anthropic(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
    msg = client.messages.create(model="tiny_llama", max_tokens=600, tools=ANTHROPIC_TOOLS,
                                 tool_choice={"type": "none"},
                                 messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert [b.type for b in msg.content if b.type == "tool_use"] == []
    assert "".join(b.text for b in msg.content if b.type == "text") == "\n\nLet me check.\n\nDone."
    assert msg.stop_reason == "end_turn"


def test_anthropic_thinking_disabled_without_switch_withholds_blocks(servers):
    """MiniMax-M2's template has no switch: the chain of thought is still separated (so the tool
    parser never reads it) and only its blocks are withheld."""
    srv = servers["minimax"]
    client = anthropic.Anthropic(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
    msg = client.messages.create(model="tiny_llama", max_tokens=600, tools=ANTHROPIC_TOOLS,
                                 thinking={"type": "disabled"},
                                 messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert [b.type for b in msg.content] == ["text", "tool_use", "text"]
