"""Chat messages → prompt token ids through the model's chat template (the default renderer).

Replaceable: `create_app(..., chat_renderer=...)` takes any callable with this signature, which is
where the model-specific encoders plug in. Template failures are the client's input failing the
template's own rules (roles out of order, say), so they are 400s, never 500s.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from atom.entrypoints.openai.errors import bad_request
from atom.entrypoints.openai.protocol import ChatCompletionRequest, ChatMessage

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


class TemplateChatRenderer:
    def __init__(self, tokenizer: Any, template: Optional[str] = None) -> None:
        self._tok = tokenizer
        has_own = bool(getattr(tokenizer, "chat_template", None))
        self._template = template if template is not None else (None if has_own else FALLBACK_TEMPLATE)
        self._jinja: Any = None
        if not hasattr(tokenizer, "apply_chat_template"):  # e.g. the byte-level stand-in
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            self._jinja = ImmutableSandboxedEnvironment().from_string(self._template or FALLBACK_TEMPLATE)

    def _text(self, conversation: list[dict[str, Any]], req: ChatCompletionRequest,
              kwargs: dict[str, Any]) -> str:
        if self._jinja is not None:
            return self._jinja.render(messages=conversation, tools=req.tools,
                                      add_generation_prompt=req.add_generation_prompt, **kwargs)
        return self._tok.apply_chat_template(
            conversation, tools=req.tools, add_generation_prompt=req.add_generation_prompt,
            tokenize=False, chat_template=self._template, **kwargs)

    def __call__(self, req: ChatCompletionRequest, messages: list[ChatMessage]) -> list[int]:
        conversation = [message_dict(i, m) for i, m in enumerate(messages)]
        kwargs = dict(req.chat_template_kwargs or {})
        try:
            text = self._text(conversation, req, kwargs)
        except Exception as exc:  # jinja raise_exception / TemplateError / TypeError on bad input
            raise bad_request(f"the chat template rejected these messages: {exc}", "messages",
                              "invalid_messages") from exc
        return list(self._tok.encode(text, add_special_tokens=False))
