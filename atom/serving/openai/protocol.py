"""Wire types of the OpenAI API as msgspec Structs: decoded and encoded without a dict detour.

Request Structs forbid unknown fields, so a parameter a client believes changes the output is never
silently dropped; fields that are recognised but not implemented are declared here and refused by
name in `validation.py`.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

import msgspec
from msgspec import Meta, Struct

from atom.serving.common.bounds import (SCHEMA_OBJECT, LogitBias, NonNegFloat, NonNegInt, NumChoices,
                                        Penalty, PositiveInt, Probability, Seed, StopField, StopTokenIds,
                                        TokenId, TopK, TopLogprobs, UnitInterval)
from atom.serving.common.usage import UsageInfo

# Tools stay plain dicts (the templates and the tool reader take them as such); validation.py
# checks what this schema documents.
_TOOL_SCHEMA = {"type": "object", "required": ["function"], "properties": {
    "type": {"enum": ["function"]},
    "function": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
        "parameters": SCHEMA_OBJECT}}}}
ToolSpec = Annotated[dict[str, Any], Meta(extra_json_schema=_TOOL_SCHEMA)]
_NAMED_CHOICE_SCHEMA = {"type": "object", "required": ["type", "function"], "properties": {
    "type": {"enum": ["function"]},
    "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}
ToolChoiceField = Union[Literal["none", "auto", "required"],
                        Annotated[dict[str, Any], Meta(extra_json_schema=_NAMED_CHOICE_SCHEMA)], None]


class StreamOptions(Struct, forbid_unknown_fields=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatMessage(Struct):
    """One message; extra keys a client attaches to a message are tolerated (they never reach
    the sampler), unlike unknown top-level parameters."""

    role: str
    content: Union[str, list[dict[str, Any]], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[dict[str, Any]]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None


class _SamplingFields(Struct, kw_only=True, forbid_unknown_fields=True):
    """Fields both endpoints share; defaults are the spec's."""

    model: Optional[str] = None
    temperature: Optional[NonNegFloat] = None
    top_p: Optional[Probability] = None
    top_k: Optional[TopK] = None
    max_tokens: Optional[PositiveInt] = None
    stop: StopField = None
    stop_token_ids: Optional[StopTokenIds] = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    seed: Optional[Seed] = None
    n: NumChoices = 1
    presence_penalty: Optional[Penalty] = None
    frequency_penalty: Optional[Penalty] = None
    repetition_penalty: Optional[Annotated[float, Meta(ge=0.01, le=10.0)]] = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    user: Optional[str] = None
    metadata: Optional[dict[str, Any]] = None
    store: Optional[bool] = None
    service_tier: Optional[str] = None
    # Recognised, not implemented: refused by name when set to anything that changes the output.
    logit_bias: Optional[LogitBias] = None
    min_p: Optional[UnitInterval] = None
    min_tokens: Optional[NonNegInt] = None
    best_of: Optional[NumChoices] = None
    response_format: Optional[dict[str, Any]] = None
    guided_json: Any = None
    guided_regex: Optional[str] = None
    guided_choice: Optional[list[str]] = None
    guided_grammar: Optional[str] = None


class ChatCompletionRequest(_SamplingFields, kw_only=True, forbid_unknown_fields=True):
    messages: Optional[list[ChatMessage]] = None
    prompt: Optional[list[ChatMessage]] = None  # the spec's alias for `messages`
    max_completion_tokens: Optional[PositiveInt] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[TopLogprobs] = None
    tools: Optional[list[ToolSpec]] = None
    tool_choice: ToolChoiceField = None
    parallel_tool_calls: Optional[bool] = None
    chat_template_kwargs: Optional[dict[str, Any]] = None
    add_generation_prompt: bool = True
    modalities: Optional[list[str]] = None
    audio: Optional[dict[str, Any]] = None
    prediction: Optional[dict[str, Any]] = None


class CompletionRequest(_SamplingFields, kw_only=True, forbid_unknown_fields=True):
    # str, a batch of str, a token-id list or a batch of them (what lm-eval and the SDK send).
    # (msgspec allows one array type per union, so the items are checked in serving_completion.)
    prompt: Union[str, list[Union[str, TokenId, list[TokenId]]], None] = None
    echo: bool = False
    logprobs: Optional[TopLogprobs] = None
    suffix: Optional[str] = None


# ---- responses -------------------------------------------------------------------------------

class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: Optional[list[int]] = None


class ChatTokenLogprob(Struct):
    token: str
    logprob: float
    bytes: Optional[list[int]] = None
    top_logprobs: list[TopLogprob] = msgspec.field(default_factory=list)


class ChatLogprobs(Struct):
    content: list[ChatTokenLogprob] = msgspec.field(default_factory=list)


class ToolCallFunction(Struct, omit_defaults=True):
    name: Optional[str] = None
    arguments: Optional[str] = None


class ToolCall(Struct, omit_defaults=True):
    id: Optional[str] = None
    type: Optional[Literal["function"]] = None
    index: Optional[int] = None
    function: Optional[ToolCallFunction] = None


class ChatResponseMessage(Struct):
    role: str
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None


class ChatChoice(Struct):
    index: int
    message: ChatResponseMessage
    finish_reason: Optional[str] = None
    logprobs: Optional[ChatLogprobs] = None


class ChatCompletionResponse(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    object: str = "chat.completion"


class DeltaMessage(Struct, omit_defaults=True):
    """Only what this chunk adds: absent keys mean "nothing new", per OpenAI."""

    role: Optional[str] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None


class ChatChunkChoice(Struct):
    index: int
    delta: DeltaMessage
    finish_reason: Optional[str] = None
    logprobs: Optional[ChatLogprobs] = None


class ChatCompletionChunk(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    object: str = "chat.completion.chunk"
    usage: Optional[UsageInfo] = None


class CompletionLogprobs(Struct):
    tokens: list[str] = msgspec.field(default_factory=list)
    token_logprobs: list[Optional[float]] = msgspec.field(default_factory=list)
    top_logprobs: list[Optional[dict[str, float]]] = msgspec.field(default_factory=list)
    text_offset: list[int] = msgspec.field(default_factory=list)


class CompletionChoice(Struct):
    index: int
    text: str
    finish_reason: Optional[str] = None
    logprobs: Optional[CompletionLogprobs] = None


class CompletionResponse(Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Optional[UsageInfo] = None
    object: str = "text_completion"


class ModelCard(Struct):
    id: str
    created: int
    object: str = "model"
    owned_by: str = "atom"
    root: Optional[str] = None
    max_model_len: Optional[int] = None


class ModelList(Struct):
    data: list[ModelCard]
    object: str = "list"


class HealthResponse(Struct):
    status: str = "ok"
