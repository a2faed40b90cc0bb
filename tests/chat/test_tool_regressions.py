"""Shapes the spec names as past defects, each pinned against the one reader."""
from __future__ import annotations

import json

import pytest

from atom.chat import kimi_k3_tokens as k3
from atom.chat.tool_parser.dsml import DsmlFormat
from atom.chat.tool_parser.events import ContentDelta, ToolCallArgs, ToolCallStart
from atom.chat.tool_parser.glm import GlmFormat
from atom.chat.tool_parser.kimi_k3 import KimiK3Format
from atom.chat.tool_parser.minimax import MiniMaxFormat
from atom.chat.tool_parser.policy import ToolPolicy
from atom.chat.tool_parser.qwen import QwenFormat
from atom.chat.tool_parser.stream import ToolCallStream, read_whole

POLICY = ToolPolicy({"write_file": {}, "get_weather": {}, "br": {}})
T = "｜DSML｜"


def calls(events):
    names = {e.index: e.name for e in events if isinstance(e, ToolCallStart)}
    return [(names[e.index], json.loads(e.arguments)) for e in events
            if isinstance(e, ToolCallArgs)]


def content(events):
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def by_chunks(fmt, text, size, policy=POLICY):
    reader = ToolCallStream(fmt, policy)
    out = [e for i in range(0, len(text), size) for e in reader.feed(text[i:i + size])]
    return out + reader.finish()


class TestAGiveUpProbeStaysReverted:
    """A real call whose body is past any head-sized window is still a call."""

    BODY = json.dumps({"path": "a.txt", "content": "x" * 1200})
    DIRECT_JSON = f'<{T}tool_calls>\n<{T}invoke name="write_file">\n{BODY}\n</{T}invoke>\n' \
                  f'</{T}tool_calls>'

    def test_positive_control_dsml_accepts_direct_json(self):
        parsed = DsmlFormat.parse_region(self.DIRECT_JSON, at_end=False)
        assert parsed is not None and parsed.end == len(self.DIRECT_JSON)

    @pytest.mark.parametrize("size", [1, 7, 256, 10_000])
    def test_long_direct_json_is_a_call(self, size):
        events = by_chunks(DsmlFormat, self.DIRECT_JSON, size)
        assert calls(events) == [("write_file", json.loads(self.BODY))] and content(events) == ""

    def test_wrapperless_invoke_is_a_call(self):
        text = f'Sure. <{T}invoke name="get_weather">\n<{T}parameter name="city" ' \
               f'string="true">Paris</{T}parameter>\n</{T}invoke> Done.'
        events = read_whole(DsmlFormat, text, POLICY)
        assert calls(events) == [("get_weather", {"city": "Paris"})]
        assert content(events) == "Sure.  Done."


def test_self_closing_invoke_is_one_call_not_two():
    text = f'<{T}tool_calls>\n<{T}invoke name="get_weather"/>\n<{T}invoke name="write_file">\n' \
           f'<{T}parameter name="path" string="true">a</{T}parameter>\n</{T}invoke>\n</{T}tool_calls>'
    for size in (1, 3, 64, len(text)):
        events = by_chunks(DsmlFormat, text, size)
        assert calls(events) == [("get_weather", {}), ("write_file", {"path": "a"})]
        assert len([e for e in events if isinstance(e, ToolCallStart)]) == 2


def test_a_name_cut_mid_token_is_not_announced():
    """`<br>` split one character in must not name a tool `b` at one chunk size only."""
    text = "Use <tool_call>br<br> tags for breaks, then keep talking about layout."
    for size in range(1, 12):
        events = by_chunks(GlmFormat, text, size)
        assert not any(isinstance(e, ToolCallStart) for e in events), size
        assert content(events) == text


def test_quoted_opener_with_long_explanation_is_released_whole():
    text = "The tag <tool_call> starts a call. " + "It is followed by the name. " * 40
    for fmt in (GlmFormat, QwenFormat, MiniMaxFormat):
        for size in (1, 5, 64):
            assert content(by_chunks(fmt, text, size)) == text


def test_qwen_wrapper_closer_inside_a_value_does_not_end_the_call():
    text = "<tool_call>\n<function=write_file>\n<parameter=content>\nuse </tool_call> here\n" \
           "</parameter>\n</function>\n</tool_call>After."
    for size in (1, 4, len(text)):
        events = by_chunks(QwenFormat, text, size)
        assert calls(events) == [("write_file", {"content": "use </tool_call> here"})]
        assert content(events) == "After."


def test_k3_framing_never_leaks_even_when_calls_are_forbidden():
    text = k3.open_tag("response") + "Hello there." + k3.close_tag("response") + \
        k3.close_tag("message") + k3.END_OF_MSG
    none = ToolPolicy({"get_weather": {}}, suppress_calls=True)
    for size in (1, 3, len(text)):
        assert content(by_chunks(KimiK3Format, text, size, none)) == "Hello there."


def test_k3_quoted_call_opener_loses_nothing():
    text = k3.open_tag("response") + "Write " + k3.CALL_OPEN + " to call a tool." + \
        k3.close_tag("response")
    assert content(read_whole(KimiK3Format, text, POLICY)) == \
        "Write " + k3.CALL_OPEN + " to call a tool."


def test_tool_choice_none_reply_that_was_only_a_call_is_empty():
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" \
           "</function>\n</tool_call>"
    none = ToolPolicy({"get_weather": {}}, suppress_calls=True)
    assert read_whole(QwenFormat, text, none) == []
