"""OpenAI chat messages as the chat layer's conversation: roles checked, text content parts
joined (the only kind served), and the request's tools and template kwargs carried along."""
from __future__ import annotations

from typing import Any

from atom.chat.chat_io import ChatRequest
from atom.serving.common.errors import bad_request
from atom.serving.openai.protocol import ChatCompletionRequest, ChatMessage

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def chat_request(req: ChatCompletionRequest, messages: list[ChatMessage]) -> ChatRequest:
    return ChatRequest([message_dict(i, m) for i, m in enumerate(messages)], req.tools,
                       req.tool_choice, req.add_generation_prompt,
                       dict(req.chat_template_kwargs or {}))


def message_dict(i: int, m: ChatMessage) -> dict[str, Any]:
    if m.role not in ROLES:
        raise bad_request(f"unknown role {m.role!r}; expected one of {', '.join(ROLES)}",
                          f"messages[{i}].role", "invalid_value")
    content: Any = m.content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"content part of type {part.get('type')!r} is not supported "
                                  "(text only)", f"messages[{i}].content[{j}]", "unsupported_content")
            parts.append(part["text"])
        content = "".join(parts)
    d: dict[str, Any] = {"role": m.role, "content": content if content is not None else ""}
    for key in ("name", "tool_calls", "tool_call_id", "reasoning_content"):
        value = getattr(m, key)
        if value is not None:
            d[key] = value
    return d
