"""What every chat renderer shares: its signature, the roles, messages as template dicts, and
the plain ChatML template for tokenizers that ship none.

A renderer (`create_app(..., chat_renderer=...)`; by default tool_parser/chat_io.py's, over
chat_encoders.py's bounded sandbox) is any callable with this signature; prompt_input.py runs it
off the event loop and turns whatever it raises into a 400.
"""
from __future__ import annotations

from typing import Any, Callable

from atom.serving.errors import bad_request
from atom.serving.openai.protocol import ChatCompletionRequest, ChatMessage

ChatRenderer = Callable[[ChatCompletionRequest, list[ChatMessage]], list[int]]

ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# For tokenizers that ship no template (dummy-weight and test models): plain ChatML.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


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
