"""One model's chat hookup: its template renders a conversation, and each choice of the answer is
read by a `ResponseReader` built for that rendering.

The template, tool-call format, reasoning dialect and thinking switch are resolved once
(`build_chat_io`). A rendering keeps its generation prompt (what the template added for the
assistant's turn, found by rendering the conversation a second time without it) in the
`RenderedChat` it returns, because whether the output begins inside the reasoning channel is
read from that; the endpoint hands the same object back to `reader`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from atom.chat.encoders import (FALLBACK_TEMPLATE, ChatEncoder, JinjaChatEncoder,
                                TemplateRenderError, apply_chat_template, load_chat_encoder)
from atom.chat.formats import ModelFormats, resolve_model_formats
from atom.chat.reader import ResponseReader
from atom.chat.reasoning import ReasoningChannel
from atom.chat.reasoning_dialects import generation_part
from atom.chat.tool_parser.policy import ToolPolicy
from atom.config.schema import Config

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A conversation as the template sees it: message dicts (role, content, tool_calls, ...),
    tools in the function-tool shape templates take, and the request's template kwargs."""

    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]] = None
    # "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}}
    tool_choice: Any = None
    add_generation_prompt: bool = True
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RenderedChat:
    """A rendered prompt and what its reader needs to know about how it was rendered."""

    request: ChatRequest
    token_ids: list[int]
    generation: str  # the text the generation prompt added ('' when none was added)
    thinking_off: Optional[bool]  # the request turned the template's thinking switch off / on


class ChatIO:
    """Renderer and reader factory sharing one resolved model format."""

    def __init__(self, encoder: ChatEncoder, formats: ModelFormats, tokenizer: Any) -> None:
        self.encoder = encoder
        self.formats = formats
        self._tok = tokenizer

    def render(self, req: ChatRequest) -> RenderedChat:
        """Raises TemplateRenderError when the template refuses the conversation."""
        kwargs = self._kwargs(req)
        text = self.render_text(req)
        generation = self._generation_text(req, kwargs, text)
        return RenderedChat(req, list(self._tok.encode(text, add_special_tokens=False)),
                            generation, self._thinking_off(kwargs))

    def render_text(self, req: ChatRequest) -> str:
        return apply_chat_template(self.encoder, req.messages, req.tools,
                                   req.add_generation_prompt, **self._kwargs(req))

    def reader(self, rendered: RenderedChat) -> ResponseReader:
        """The reader for one choice of the answer to `rendered`."""
        policy = ToolPolicy.from_request(rendered.request.tools, rendered.request.tool_choice)
        return ResponseReader(self.channel(rendered), self.formats.tool_format, policy)

    def channel(self, rendered: RenderedChat) -> ReasoningChannel:
        """Where the answer to `rendered` starts: inside or outside the reasoning channel."""
        return ReasoningChannel.for_request(self.formats.dialect, rendered.generation,
                                            rendered.thinking_off, self.formats.opens_by_default)

    @staticmethod
    def _kwargs(req: ChatRequest) -> dict[str, Any]:
        kwargs = dict(req.template_kwargs)
        if req.tool_choice is not None:
            kwargs.setdefault("tool_choice", req.tool_choice)
        return kwargs

    def _generation_text(self, req: ChatRequest, kwargs: dict[str, Any], prompt: str) -> str:
        """The part of `prompt` the template wrote for the assistant's turn ('' when the request
        continues its last message: nothing was added)."""
        if not req.add_generation_prompt:
            return ""
        try:
            without: Optional[str] = apply_chat_template(self.encoder, req.messages, req.tools,
                                                         False, **kwargs)
        except TemplateRenderError:
            without = None
        return generation_part(prompt, without, self.formats.dialect)

    def _thinking_off(self, kwargs: dict[str, Any]) -> Optional[bool]:
        switch = self.formats.thinking_switch
        if switch is None or switch.kwarg not in kwargs:
            return None
        return kwargs[switch.kwarg] == switch.off


def build_chat_io(cfg: Config, tokenizer: Any) -> ChatIO:
    """Resolve the template, the tool-call format, the dialect and the thinking switch once."""
    special = {k: getattr(tokenizer, k) for k in ("bos_token", "eos_token")
               if isinstance(getattr(tokenizer, k, None), str)}
    model_dir = cfg.model.path if cfg.model.path and Path(cfg.model.path).is_dir() else None
    encoder = load_chat_encoder(model_dir, cfg.format.chat_template, cfg.model.trust_remote_code,
                                tokenizer)
    if encoder is None:
        logger.info("the model ships no chat template; using plain ChatML")
        encoder = JinjaChatEncoder(FALLBACK_TEMPLATE, special)
    formats = resolve_model_formats(encoder, cfg.format.tool_call_parser,
                                    cfg.format.reasoning_dialect)
    return ChatIO(encoder, formats, tokenizer)
