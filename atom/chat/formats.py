"""Everything the server resolves from the chat template once at startup, in one call."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from atom.chat.encoders import (
    ChatEncoder, TemplateRenderError, ThinkingSwitch, apply_chat_template, chat_template_source,
    find_thinking_switch, format_evidence)
from atom.chat.reasoning_dialects import (
    ReasoningDialect, generation_part, resolve_dialect)
from atom.chat.tool_parser.region import ToolFormat
from atom.chat.tool_parser.registry import check_format_name, resolve_tool_format


@dataclass(frozen=True, slots=True)
class ModelFormats:
    """How this model's raw text becomes content, reasoning_content and tool_calls."""

    tool_format: Optional[type[ToolFormat]]
    dialect: ReasoningDialect
    thinking_switch: Optional[ThinkingSwitch]
    opens_by_default: bool = False


def resolve_model_formats(encoder: Optional[ChatEncoder], tool_call_parser: str = "auto",
                          reasoning_dialect: str = "auto") -> ModelFormats:
    """Names are checked first so a typo fails before any template is rendered or weight loaded."""
    check_format_name(tool_call_parser)
    if encoder is None:
        return ModelFormats(resolve_tool_format(None, tool_call_parser),
                            resolve_dialect(None, reasoning_dialect), None)
    evidence = format_evidence(encoder) if tool_call_parser == "auto" else None
    dialect = resolve_dialect(chat_template_source(encoder), reasoning_dialect)
    return ModelFormats(
        resolve_tool_format(evidence, tool_call_parser),
        dialect,
        find_thinking_switch(encoder),
        opens_by_default(encoder, dialect),
    )


_PROBE = [{"role": "user", "content": "What is the weather in Paris?"}]


def opens_by_default(encoder: ChatEncoder, dialect: ReasoningDialect) -> bool:
    """Does the template's own generation prompt open the channel? That is the model's default
    for a request whose generation prompt is silent (R1-style templates render none after a
    tool result)."""
    try:
        prompt = apply_chat_template(encoder, _PROBE, None, True)
        without = apply_chat_template(encoder, _PROBE, None, False)
    except (TemplateRenderError, TypeError, AttributeError):
        return False
    return dialect.prompt_state(generation_part(prompt, without, dialect)) is True
