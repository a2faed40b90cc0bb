"""Real chat templates: rendering, and `auto` resolving each family's format, dialect, switch."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "templates"))
import llama_cpp_templates  # noqa: E402

from atom.chat.chat_io import ChatIO, ChatRequest  # noqa: E402
from atom.chat.encoders import (  # noqa: E402
                                JinjaChatEncoder, TemplateRenderError, apply_chat_template, find_thinking_switch,
                                load_chat_encoder)
from atom.chat.formats import resolve_model_formats  # noqa: E402
from atom.chat.reader import read_response  # noqa: E402
from atom.chat.reasoning import ReasoningChannel  # noqa: E402
from atom.chat.reasoning_dialects import DIALECTS  # noqa: E402
from atom.chat.tool_parser.events import ToolCallArgs, ToolCallStart  # noqa: E402
from atom.chat.tool_parser.policy import ToolPolicy  # noqa: E402
from atom.chat.tool_parser.registry import (  # noqa: E402
                                            FORMATS, UnknownToolFormat, resolve_tool_format)
from atom.config.format import REASONING_DIALECTS, TOOL_CALL_PARSERS  # noqa: E402
from atom.loader.tokenizer import ByteTokenizer  # noqa: E402

# template -> (tool format, reasoning dialect, thinking-switch kwarg)
EXPECTED = {
    "Qwen-Qwen3-0.6B": ("hermes", "think", "enable_thinking"),
    "Qwen3-Coder": ("qwen", "think", None),
    "Qwen3.5-4B": ("qwen", "think", "enable_thinking"),
    "Qwen-Qwen2.5-7B-Instruct": ("hermes", "think", None),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("hermes", "think", None),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("hermes", "think", None),
    "deepseek-ai-DeepSeek-V3.2": ("dsml", "think", "enable_thinking"),
    "deepseek-ai-DeepSeek-V4": ("dsml", "think", "enable_thinking"),
    "deepseek-ai-DeepSeek-V3.1": ("deepseek_v3", "think", "enable_thinking"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("deepseek_v3", "think", "enable_thinking"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (None, "think", None),
    "llama-cpp-deepseek-r1": ("deepseek_v3", "think", None),
    "moonshotai-Kimi-K2": ("kimi", "think", None),
    "Kimi-K2-Instruct": ("kimi", "think", None),
    "Kimi-K3": ("kimi_k3", "kimi_k3", "thinking"),
    "GLM-4.6": ("glm", "think", "enable_thinking"),
    "GLM-4.7-Flash": ("glm", "think", "enable_thinking"),
    "MiniMax-M2": ("minimax", "think", None),
    "MiniMax-M3": (None, "think", "thinking_mode"),
    "meta-llama-Llama-3.1-8B-Instruct": ("llama3_json", "think", None),
    "meta-llama-Llama-3.2-3B-Instruct": ("llama3_json", "think", None),
    "meta-llama-Llama-3.3-70B-Instruct": ("llama3_json", "think", None),
}
# The templates whose own generation prompt opens the channel (measured at startup).
OPENS_BY_DEFAULT = {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "llama-cpp-deepseek-r1",
                    "Kimi-K3", "MiniMax-M2", "GLM-4.7-Flash", "Qwen3.5-4B"}
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
BYTES = ByteTokenizer(256, None)  # the prompt's token ids play no part in these decisions
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"},
                                                     "limit": {"type": "integer"}}}}}]


@pytest.fixture(scope="module")
def encoders():
    root = llama_cpp_templates.template_dir()
    return {name: JinjaChatEncoder((root / f"{name}.jinja").read_text(encoding="utf-8"), SPECIAL)
            for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_auto_resolves_each_family(encoders, name):
    fmt, dialect, switch = EXPECTED[name]
    resolved = resolve_model_formats(encoders[name])
    assert (resolved.tool_format.NAME if resolved.tool_format else None) == fmt
    assert resolved.dialect.name == dialect
    assert (resolved.thinking_switch.kwarg if resolved.thinking_switch else None) == switch
    assert resolved.opens_by_default is (name in OPENS_BY_DEFAULT)


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e[0]))
def test_the_templates_own_reply_reads_back_as_the_call(encoders, name):
    """What the template writes for an assistant tool call is what the resolved format reads."""
    enc = encoders[name]
    user = [{"role": "user", "content": "Define 'sesquipedalian'."}]
    call = {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"word": "sesquipedalian",
                                                                "limit": 2})}}]}
    prompt = apply_chat_template(enc, user, TOOLS, add_generation_prompt=True)
    full = apply_chat_template(enc, user + [call], TOOLS, add_generation_prompt=False)
    formats = resolve_model_formats(enc)
    shared = len(os.path.commonprefix([prompt, full]))
    # The prompt and the reply may share the first characters of a marker ("<"): back off.
    markers = formats.tool_format.START_MARKERS + formats.dialect.markers
    shared -= next((k for k in range(1, 40)
                    if any(full.startswith(m, shared - k) for m in markers)), 0)
    reply = full[shared:]
    # The reply continues the part of the prompt it shares (a template may render a past turn
    # without the thinking block its generation prompt opens).
    # (That rendered turn holds no chain of thought unless the shared part opened one.)
    channel = ReasoningChannel(formats.dialect,
                               formats.dialect.prompt_state(prompt[:shared]) is True)
    events = read_response(channel, formats.tool_format, reply, ToolPolicy.from_request(TOOLS))
    names = [e.name for e in events if isinstance(e, ToolCallStart)]
    args = [json.loads(e.arguments) for e in events if isinstance(e, ToolCallArgs)]
    assert names == ["lookup"] and args == [{"word": "sesquipedalian", "limit": 2}], reply


def _begins_inside(enc, messages, **kwargs):
    """What the server decides for one request: ChatIO renders, finds the generation prompt
    by rendering again without it, and the channel reads that."""
    io = ChatIO(enc, resolve_model_formats(enc), BYTES)
    return io.channel(io.render(ChatRequest(messages, template_kwargs=kwargs))).begins_inside


HI = [{"role": "user", "content": "hi"}]
AFTER_TOOL = [{"role": "user", "content": "weather?"}, {"role": "tool", "content": "Sunny"}]


@pytest.mark.parametrize("name,messages,kwargs,inside", [
    ("Qwen-Qwen3-0.6B", HI, {}, False),                       # the model writes <think> itself
    ("Qwen-Qwen3-0.6B", HI, {"enable_thinking": False}, False),
    ("Qwen3.5-4B", HI, {}, True),
    ("Qwen3.5-4B", HI, {"enable_thinking": False}, False),
    ("Kimi-K3", HI, {}, True),
    ("Kimi-K3", HI, {"thinking": False}, False),
    ("MiniMax-M2", HI, {}, True),
    ("GLM-4.7-Flash", HI, {}, True),
    ("GLM-4.7-Flash", HI, {"enable_thinking": False}, False),
    ("deepseek-ai-DeepSeek-V3.1", HI, {}, False),
    ("deepseek-ai-DeepSeek-V3.1", HI, {"thinking": True}, True),
    ("llama-cpp-deepseek-r1", HI, {}, True),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", HI, {}, True),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", AFTER_TOOL, {}, True),  # silent: the default
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", HI, {}, False),     # renders <think>\n</think>
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", HI, {"enable_thinking": True}, True),
])
def test_output_begins_inside_the_channel_per_request(encoders, name, messages, kwargs, inside):
    assert _begins_inside(encoders[name], messages, **kwargs) is inside


@pytest.mark.parametrize("name", ["llama-cpp-deepseek-r1",
                                  "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                                  "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"])
def test_r1_answer_starts_inside_the_block_its_prompt_opened(encoders, name):
    enc = encoders[name]
    io = ChatIO(enc, resolve_model_formats(enc), BYTES)
    kwargs = {"enable_thinking": True} if io.formats.thinking_switch else {}
    rendered = io.render(ChatRequest(HI, template_kwargs=kwargs))
    channel = ReasoningChannel.for_request(io.formats.dialect, rendered.generation)
    assert channel.split("plan</think>answer") == ("plan", "answer")


def _every_template():
    return sorted(p.stem for p in llama_cpp_templates.template_dir().glob("*.jinja"))


def test_a_user_message_quoting_the_marker_never_opens_the_channel():
    """For every template of the pinned set: the decision is the generation prompt's, so a user
    message that ends quoting `<think>` (or K3's opener) reads exactly like one that does not."""
    decided = 0
    for name in _every_template():
        enc = JinjaChatEncoder(llama_cpp_templates.read_template(name), SPECIAL)
        try:
            plain = _begins_inside(enc, [{"role": "user", "content": "what is this tag?"}])
        except TemplateRenderError:
            continue
        dialect = resolve_model_formats(enc).dialect
        quoting = [{"role": "user", "content": "what is this tag? " + dialect.start}]
        assert _begins_inside(enc, quoting) is plain, name
        decided += 1
    assert decided >= 60


def test_rendering_has_hf_semantics():
    enc = JinjaChatEncoder(
        "{{ messages[0].content|tojson }}|{{ {'b': 1, 'a': [1]}|tojson(indent=1, sort_keys=true) }}"
        "|{% generation %}{{ 'g' }}{% endgeneration %}|{% set xs = [] %}{% set _ = xs.append(1) %}"
        "{{ strftime_now('%Y')|length }}{% for i in range(3) %}{% if i == 1 %}{% break %}"
        "{% endif %}{{ i }}{% endfor %}")
    out = enc.render([{"role": "user", "content": "<a href='x'>&</a>"}])
    assert out.startswith('"<a href=\'x\'>&</a>"|{\n "a": [\n  1\n ],\n "b": 1\n}|g|')
    assert out.endswith("40")


def test_do_extension_not_needed_and_raise_exception_maps():
    enc = JinjaChatEncoder("{{ raise_exception('no system role') }}")
    with pytest.raises(TemplateRenderError, match="no system role"):
        enc.render([])
    escape = JinjaChatEncoder("{{ messages.__class__.__mro__ }}")
    with pytest.raises(TemplateRenderError):
        escape.render([])


def test_python_encoder_gets_only_the_kwargs_it_takes(tmp_path):
    (tmp_path / "encoding").mkdir()
    (tmp_path / "encoding" / "encoding_fake.py").write_text(
        "def encode_messages(messages, thinking_mode='thinking', add_generation_prompt=True):\n"
        "    tail = '<think>' if thinking_mode == 'thinking' else '</think>'\n"
        "    return ''.join(m['content'] for m in messages) + (tail if add_generation_prompt "
        "else '')\n")
    assert load_chat_encoder(tmp_path, trust_remote_code=False) is None
    enc = load_chat_encoder(tmp_path, trust_remote_code=True)
    out = apply_chat_template(enc, [{"role": "user", "content": "hi"}], TOOLS,
                              response_format={"type": "json_object"}, tool_choice="none",
                              thinking_effort="max")
    assert out == "hi<think>"
    switch = find_thinking_switch(enc)
    assert (switch.kwarg, switch.off) == ("thinking_mode", "chat")


def test_model_dir_template_from_tokenizer_config(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"content": "<s>"},
        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}))
    enc = load_chat_encoder(tmp_path)
    assert enc.render([{"role": "user", "content": "x"}]) == "<s>x"


def test_names_match_the_config_vocabulary():
    assert set(FORMATS) == set(TOOL_CALL_PARSERS) - {"auto", "none"}
    assert set(DIALECTS) == set(REASONING_DIALECTS) - {"auto"}
    with pytest.raises(UnknownToolFormat, match="is not one of ATOM's formats"):
        resolve_tool_format(None, "hermes2")
    assert resolve_tool_format("<tool_call>\n<function=x>", "none") is None
    assert resolve_tool_format("nothing here") is None
