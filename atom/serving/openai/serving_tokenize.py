"""vLLM's `POST /tokenize` and `POST /detokenize`: the served model's tokenizer over HTTP.

Clients and benchmarks use them to count and build prompts with exactly the tokenizer the server
uses, whatever form it takes here (a GGUF's vocabulary, the byte stand-in of a dummy-weight
model) and wherever the client runs. Same bodies as vLLM's: `prompt` (text) or `messages` (run
through the server's own chat template); the answer carries `count`, `max_model_len`, `tokens`.
"""
from __future__ import annotations

from typing import Any, Optional

import msgspec
from litestar import Response, post
from litestar.params import JSONBody

from atom.chat.chat_io import ChatIO, ChatRequest
from atom.serving.common.context import ServerContext
from atom.serving.common.errors import bad_request
from atom.serving.common.sampling import check_model
from atom.serving.common.sse import json_response
from atom.serving.openai.chat_messages import message_dict
from atom.serving.openai.protocol import ChatMessage


class TokenizeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: Optional[str] = None
    prompt: Optional[str] = None
    messages: Optional[list[ChatMessage]] = None
    add_special_tokens: bool = True  # for `prompt`; a rendered chat prompt carries its own
    add_generation_prompt: bool = True
    tools: Optional[list[dict[str, Any]]] = None
    chat_template_kwargs: Optional[dict[str, Any]] = None


class DetokenizeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tokens: list[int]
    model: Optional[str] = None


def _prompt_ids(ctx: ServerContext, chat_io: ChatIO, req: TokenizeRequest) -> list[int]:
    if (req.prompt is None) == (req.messages is None):
        raise bad_request("give exactly one of `prompt` and `messages`", "prompt", "invalid_value")
    if req.prompt is not None:
        return list(ctx.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens))
    conversation = [message_dict(i, m) for i, m in enumerate(req.messages or [])]
    text = chat_io.render_text(ChatRequest(conversation, req.tools, None,
                                           req.add_generation_prompt,
                                           dict(req.chat_template_kwargs or {})))
    return list(ctx.tokenizer.encode(text, add_special_tokens=False))


def tokenize_handlers(ctx: ServerContext, chat_io: ChatIO, guards: list[Any]) -> list[Any]:
    """The two route handlers, for the app's root (where vLLM serves them)."""

    @post("/tokenize", status_code=200, guards=guards, summary="Text or chat messages → token ids")
    async def tokenize(data: JSONBody[TokenizeRequest]) -> Response:
        check_model(data.model, ctx.aliases, ctx.model_name)
        ids = _prompt_ids(ctx, chat_io, data)
        return json_response({"count": len(ids), "max_model_len": ctx.max_model_len,
                              "tokens": ids})

    @post("/detokenize", status_code=200, guards=guards, summary="Token ids → text")
    async def detokenize(data: JSONBody[DetokenizeRequest]) -> Response:
        check_model(data.model, ctx.aliases, ctx.model_name)
        vocab = len(ctx.tokenizer)
        bad = next((i for i, t in enumerate(data.tokens) if not 0 <= t < vocab), None)
        if bad is not None:
            raise bad_request(f"token id {data.tokens[bad]} is outside the vocabulary "
                              f"(0..{vocab - 1})", f"tokens[{bad}]", "invalid_value")
        return json_response({"prompt": ctx.tokenizer.decode(data.tokens)})

    return [tokenize, detokenize]
