"""Wire types of the Anthropic Messages API (/v1/messages) as msgspec Structs.

Content blocks are a tagged union on `type`, so a block of the wrong shape (a number for `text`,
a number for `tool_result.content`) is a 400 naming its path, never a crash in translation. Blocks
tolerate keys they do not declare (`cache_control`, `citations`: they never reach the sampler);
the request itself forbids unknown fields, as the chat endpoint does.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from msgspec import Meta, Struct

from atom.serving.common.bounds import JsonSchemaObject, PositiveInt, Probability, StopList

Name = Annotated[str, Meta(min_length=1, max_length=256)]


class TextBlock(Struct, tag="text", tag_field="type"):
    text: str


class PlainTextBlock(Struct):
    """A text block where no other block may appear (`system`, `tool_result.content`). `type` is
    an ordinary required field: msgspec lets a tagged Struct outside a union omit its tag, which
    the published schema (and Anthropic) would not."""

    type: Literal["text"]
    text: str


class ToolUseBlock(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: Name
    input: dict[str, Any]


class ToolResultBlock(Struct, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: Union[str, list[PlainTextBlock], None] = None
    is_error: Optional[bool] = None


class ThinkingBlock(Struct, tag="thinking", tag_field="type"):
    thinking: str
    signature: Optional[str] = None


class RedactedThinkingBlock(Struct, tag="redacted_thinking", tag_field="type"):
    data: str


ContentBlock = Union[TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock]


class MessageParam(Struct):
    role: Literal["user", "assistant"]
    content: Union[str, list[ContentBlock]]


class ToolParam(Struct):
    name: Name
    input_schema: JsonSchemaObject
    description: Optional[str] = None


class ToolChoiceAuto(Struct, tag="auto", tag_field="type"):
    disable_parallel_tool_use: Optional[bool] = None


class ToolChoiceAny(Struct, tag="any", tag_field="type"):
    disable_parallel_tool_use: Optional[bool] = None


class ToolChoiceTool(Struct, tag="tool", tag_field="type"):
    name: Name
    disable_parallel_tool_use: Optional[bool] = None


class ToolChoiceNone(Struct, tag="none", tag_field="type"):
    pass


ToolChoice = Union[ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone]


class ThinkingEnabled(Struct, tag="enabled", tag_field="type"):
    budget_tokens: Optional[PositiveInt] = None


class ThinkingDisabled(Struct, tag="disabled", tag_field="type"):
    pass


class MessagesMetadata(Struct):
    user_id: Optional[str] = None


class MessagesRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    model: Optional[str] = None
    max_tokens: PositiveInt
    messages: Annotated[list[MessageParam], Meta(min_length=1)]
    system: Union[str, list[PlainTextBlock], None] = None
    tools: Optional[list[ToolParam]] = None
    tool_choice: Optional[ToolChoice] = None
    thinking: Union[ThinkingEnabled, ThinkingDisabled, None] = None
    stream: bool = False
    temperature: Optional[Annotated[float, Meta(ge=0.0, le=1.0)]] = None
    top_p: Optional[Probability] = None
    top_k: Optional[Annotated[int, Meta(ge=0, le=2**31 - 1)]] = None
    stop_sequences: Optional[StopList] = None
    metadata: Optional[MessagesMetadata] = None
    service_tier: Optional[str] = None


class AnthropicErrorInfo(Struct):
    type: str
    message: str


class AnthropicErrorResponse(Struct):
    error: AnthropicErrorInfo
    type: str = "error"
