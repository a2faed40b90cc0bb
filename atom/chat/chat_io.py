"""The OpenAI server's hookup: a chat renderer and a reader factory built from `cfg.format`.

`create_app` takes both (`chat_renderer`, `chat_reader_factory`). The renderer renders with the
model's template through chat_encoders and remembers each request's generation prompt (what the
template added for the assistant's turn, found by rendering the conversation a second time
without it), because whether the output begins inside the reasoning channel is read from that;
the reader factory then builds a `ResponseReader` per choice and turns its events into
`DeltaMessage`s.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from atom.chat.encoders import (
    ChatEncoder, JinjaChatEncoder, TemplateRenderError, apply_chat_template, load_chat_encoder)
from atom.chat.reasoning import ReasoningChannel
from atom.chat.reasoning_dialects import generation_part
from atom.chat.tool_parser.events import (
    ContentDelta, Event, ReasoningDelta, ToolCallArgs, ToolCallStart)
from atom.chat.tool_parser.policy import ToolPolicy
from atom.chat.formats import ModelFormats, resolve_model_formats
from atom.chat.reader import ResponseReader

logger = logging.getLogger(__name__)

_REMEMBERED = 1024  # prompts between render and reader creation (no await separates them)


class OpenAIChatReader:
    """A `ChatTextReader` (chat_reader.py) over one choice's `ResponseReader`."""

    def __init__(self, reader: ResponseReader) -> None:
        self._reader = reader
        self.finish_reason: Optional[str] = None

    def feed(self, text: str):
        return self._delta(self._reader.feed(text))

    def finish(self):
        return self._delta(self._reader.finish())

    def _delta(self, events: list[Event]):
        from atom.serving.openai.protocol import DeltaMessage, ToolCall, ToolCallFunction

        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        calls: dict[int, Any] = {}
        for e in events:
            if isinstance(e, ToolCallStart):
                calls[e.index] = ToolCall(id=e.id, type="function", index=e.index,
                                          function=ToolCallFunction(name=e.name, arguments=""))
            elif isinstance(e, ToolCallArgs):
                self.finish_reason = "tool_calls"
                prev = calls.get(e.index)
                fn = ToolCallFunction(name=prev.function.name if prev else None,
                                      arguments=e.arguments)
                calls[e.index] = ToolCall(id=prev.id if prev else None,
                                          type="function" if prev else None, index=e.index,
                                          function=fn)
        if not (content or reasoning or calls):
            return None
        return DeltaMessage(content=content or None, reasoning_content=reasoning or None,
                            tool_calls=[calls[i] for i in sorted(calls)] or None)


class ChatIO:
    """Renderer and reader factory sharing one resolved model format."""

    def __init__(self, encoder: ChatEncoder, formats: ModelFormats, tokenizer: Any) -> None:
        self.encoder = encoder
        self.formats = formats
        self._tok = tokenizer
        self._prompts: OrderedDict[int, tuple[str, Optional[bool]]] = OrderedDict()

    def render(self, req: Any, messages: list[Any]) -> list[int]:
        from atom.serving.openai.chat_messages import message_dict
        from atom.serving.errors import bad_request

        conversation = [message_dict(i, m) for i, m in enumerate(messages)]
        kwargs = dict(req.chat_template_kwargs or {})
        if req.tool_choice is not None:
            kwargs.setdefault("tool_choice", req.tool_choice)
        try:
            text = self.render_text(conversation, req.tools, req.add_generation_prompt, kwargs)
        except TemplateRenderError as exc:
            raise bad_request(f"the chat template rejected these messages: {exc}", "messages",
                              "invalid_messages") from exc
        generation = self.generation_text(conversation, req.tools, req.add_generation_prompt,
                                          kwargs, text)
        self._remember(id(req), generation, self.thinking_off(kwargs))
        return list(self._tok.encode(text, add_special_tokens=False))

    def render_text(self, conversation: list[dict[str, Any]], tools: Any,
                    add_generation_prompt: bool, kwargs: dict[str, Any]) -> str:
        return apply_chat_template(self.encoder, conversation, tools, add_generation_prompt,
                                   **kwargs)

    def generation_text(self, conversation: list[dict[str, Any]], tools: Any,
                        add_generation_prompt: bool, kwargs: dict[str, Any], prompt: str) -> str:
        """The part of `prompt` the template wrote for the assistant's turn ('' when the request
        continues its last message: nothing was added)."""
        if not add_generation_prompt:
            return ""
        try:
            without: Optional[str] = self.render_text(conversation, tools, False, kwargs)
        except TemplateRenderError:
            without = None
        return generation_part(prompt, without, self.formats.dialect)

    def thinking_off(self, kwargs: dict[str, Any]) -> Optional[bool]:
        switch = self.formats.thinking_switch
        if switch is None or switch.kwarg not in kwargs:
            return None
        return kwargs[switch.kwarg] == switch.off

    def reader(self, req: Any) -> OpenAIChatReader:
        return OpenAIChatReader(self.response_reader(req))

    def response_reader(self, req: Any) -> ResponseReader:
        """The events-level reader for one choice of a request this object rendered."""
        generation, off = self._prompts.get(id(req), (None, None))
        channel = ReasoningChannel.for_request(self.formats.dialect, generation, off,
                                               self.formats.opens_by_default)
        policy = ToolPolicy.from_request(req.tools, req.tool_choice)
        return ResponseReader(channel, self.formats.tool_format, policy)

    def _remember(self, key: int, generation: str, off: Optional[bool]) -> None:
        self._prompts[key] = (generation, off)
        self._prompts.move_to_end(key)
        while len(self._prompts) > _REMEMBERED:
            self._prompts.popitem(last=False)


def build_chat_io(cfg: Any, tokenizer: Any) -> ChatIO:
    """Resolve the template, the tool-call format, the dialect and the thinking switch once."""
    encoder = _encoder(cfg, tokenizer)
    formats = resolve_model_formats(encoder, cfg.format.tool_call_parser,
                                    cfg.format.reasoning_dialect)
    return ChatIO(encoder, formats, tokenizer)


def _encoder(cfg: Any, tokenizer: Any) -> ChatEncoder:
    from atom.serving.openai.chat_messages import FALLBACK_TEMPLATE

    special = {k: getattr(tokenizer, k) for k in ("bos_token", "eos_token")
               if isinstance(getattr(tokenizer, k, None), str)}
    if cfg.format.chat_template is not None:
        return JinjaChatEncoder(Path(cfg.format.chat_template).read_text(encoding="utf-8"),
                                special)
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):
        own = own.get("tool_use") or own.get("default")
    if isinstance(own, str) and own:
        return JinjaChatEncoder(own, special)
    model_dir = cfg.model.path if cfg.model.path and Path(cfg.model.path).is_dir() else None
    found = load_chat_encoder(model_dir, None, cfg.model.trust_remote_code) if model_dir else None
    if found is not None:
        return found
    logger.info("the model ships no chat template; using plain ChatML")
    return JinjaChatEncoder(FALLBACK_TEMPLATE, special)
