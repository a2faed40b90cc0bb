"""/v1/messages pieces and the chat hookup, without a server: translation, blocks, deltas."""
from __future__ import annotations

import json

import msgspec

from atom.chat.reader import ResponseReader
from atom.chat.reasoning import ReasoningChannel
from atom.chat.reasoning_dialects import THINK
from atom.chat.tool_parser.events import (
    ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart)
from atom.chat.tool_parser.policy import ToolPolicy
from atom.chat.tool_parser.qwen import QwenFormat
from atom.serving.anthropic.serving_messages import (
    BlockWriter, MessagesRequest, chat_messages, template_tools, thinking_disabled)
from atom.serving.openai.chat_reader import DeltaReader, merge_deltas

CALL_TEXT = ("<think>hmm</think>Checking.\n<tool_call>\n<function=get_weather>\n"
             "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")


def _request(body: dict) -> MessagesRequest:
    return msgspec.convert({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}], **body},
                           MessagesRequest)


def test_thinking_disabled_reads_the_type_not_truthiness():
    assert thinking_disabled(_request({"thinking": {"type": "disabled"}}).thinking) is True
    assert thinking_disabled(_request({"thinking": {"type": "enabled", "budget_tokens": 1024}}
                                      ).thinking) is False
    assert thinking_disabled(None) is None


def test_anthropic_turns_become_template_messages():
    req = _request({"system": [{"type": "text", "text": "Be brief."}], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "use the tool", "signature": ""},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]})
    msgs = chat_messages(req)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["reasoning_content"] == "use the tool" and msgs[2]["content"] == "Checking."
    assert json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert msgs[3]["tool_call_id"] == "toolu_1" and msgs[3]["content"] == "Sunny"
    tools = template_tools(_request({"tools": [{"name": "get_weather",
                                              "input_schema": {"type": "object"}}]}).tools)
    assert tools[0]["function"]["parameters"] == {"type": "object"}


def _reader():
    return ResponseReader(ReasoningChannel(THINK, False), QwenFormat,
                          ToolPolicy({"get_weather": {}}))


def test_tool_use_block_opens_when_the_arguments_arrive():
    reader, writer = _reader(), BlockWriter(withhold_thinking=False)
    frames = []
    for ch in CALL_TEXT:
        frames += writer.events(reader.feed(ch))
    frames += writer.events(reader.finish()) + writer.close()
    starts = [body["content_block"] for name, body in frames if name == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
    assert starts[2]["input"] == {}
    i = next(k for k, (n, b) in enumerate(frames) if n == "content_block_start"
             and b["content_block"]["type"] == "tool_use")
    assert frames[i + 1][1]["delta"] == {"type": "input_json_delta",
                                         "partial_json": '{"city": "Paris"}'}
    assert writer.stop_reason("stop") == "tool_use"
    assert [b["type"] for b in writer.blocks] == ["thinking", "text", "tool_use"]


def test_withheld_thinking_leaves_an_empty_text_block():
    writer = BlockWriter(withhold_thinking=True)
    writer.events([ReasoningDelta("all thought")])
    writer.close()
    assert writer.blocks == [{"type": "text", "text": ""}]
    assert writer.stop_reason("length") == "max_tokens"


LONG_CITY = "Paris" + ", France" * 40
LONG_CALL = CALL_TEXT.replace("Paris", LONG_CITY)


def test_openai_deltas_merge_into_whole_calls():
    """The name goes out early (once the region's head is whole), the arguments later; the
    non-streaming message holds one call."""
    reader = DeltaReader(_reader())
    head = LONG_CALL[:LONG_CALL.rindex(", France")]
    first = reader.feed(head)
    assert first.tool_calls[0].function.name == "get_weather"
    assert first.tool_calls[0].function.arguments == ""
    merged = merge_deltas(first, merge_deltas(reader.feed(LONG_CALL[len(head):]),
                                              reader.finish()))
    assert merged.reasoning_content == "hmm" and merged.content == "Checking.\n"
    (call,) = merged.tool_calls
    assert (call.index, call.function.name, json.loads(call.function.arguments)) == \
        (0, "get_weather", {"city": LONG_CITY})
    assert call.id and call.type == "function" and reader.finish_reason == "tool_calls"


def test_events_for_one_delta_coalesce():
    reader = DeltaReader(_reader())
    delta = reader._delta([ContentDelta("a"), ToolCallStart(0, "c0", "f"),
                           ToolCallArgs(0, "{}"), ContentDelta("b")])
    assert delta.content == "ab" and len(delta.tool_calls) == 1
    assert delta.tool_calls[0].function.arguments == "{}"


def test_arguments_that_are_no_json_object_become_text_not_a_tool_use():
    """An announced call that failed keeps its raw text (OpenAI's `arguments` can carry it);
    an Anthropic `input` must be an object, so the text goes out as text."""
    writer = BlockWriter(withhold_thinking=False)
    frames = writer.events([ToolCallStart(0, "c0", "get_weather"), ToolCallArgs(0, "city=Paris"),
                            ToolCallStart(1, "c1", "get_weather"), ToolCallArgs(1, '{"a": 1}')])
    frames += writer.close()
    assert [b["type"] for b in writer.blocks] == ["text", "tool_use"]
    assert writer.blocks[0]["text"] == "city=Paris" and writer.blocks[1]["input"] == {"a": 1}
    assert writer.stop_reason("stop") == "tool_use"
