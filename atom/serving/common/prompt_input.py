"""Prompt text → token ids: bounded before the work, and done off the event loop.

Rendering a template and tokenizing are CPU work proportional to the text; on the event loop a
multi-megabyte prompt stalls every stream and /health for seconds. So text longer than the context
could hold is refused by its character count first (`max_model_len × max_prompt_chars_per_token`),
and what is left is rendered and tokenized on a worker thread (a short completion prompt inline),
the template under a render budget (time and size) so a runaway template fails its request
instead of holding a thread.
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Optional, TypeVar

import msgspec

from atom.chat.chat_io import ChatIO, ChatRequest, RenderedChat
from atom.chat.encoders import TemplateRenderError, render_budget
from atom.serving.common.errors import OpenAIError, bad_request

T = TypeVar("T")

# Texts this short are tokenized on the loop: the thread hop costs more than they do (SmolLM2's
# tokenizer: ~0.65 ms per 1,000 characters; the hop put ~1 ms a request on a 256-request burst's
# TTFT on 2 cores, 600 → 870 ms). A chat render always hops: its time is the template's to spend.
_INLINE_CHARS = 1024

# Beyond its own deadline, how long the loop waits for a render thread that missed a check
# point (one long C call) before answering anyway.
_GRACE_S = 1.0


def max_prompt_chars(ctx: Any) -> int:
    """0 when the context length is unknown (no bound from it)."""
    return ctx.max_model_len * ctx.cfg.server.max_prompt_chars_per_token


def check_prompt_chars(chars: int, ctx: Any, param: str) -> None:
    limit = max_prompt_chars(ctx)
    if limit and chars > limit:
        raise bad_request(f"This model's maximum context length is {ctx.max_model_len} tokens; a "
                          f"prompt of {chars} characters cannot fit it (at most {limit} are "
                          "accepted).", param, "context_length_exceeded")


def message_chars(messages: list[dict[str, Any]]) -> int:
    """Characters the messages bring to the prompt (the template adds its own framing)."""
    total = 0
    for m in messages:
        content = m.get("content")
        total += len(content) if isinstance(content, str) else 0
        reasoning = m.get("reasoning_content")
        total += len(reasoning) if isinstance(reasoning, str) else 0
        if m.get("tool_calls"):
            total += len(msgspec.json.encode(m["tool_calls"]))
    return total


async def off_loop(fn: Callable[[], T]) -> T:
    """`fn()` on the default executor, with this context (and so any render budget) copied."""
    return await asyncio.get_running_loop().run_in_executor(None, contextvars.copy_context().run, fn)


async def render_chat(ctx: Any, chat_io: ChatIO, chat: ChatRequest,
                      param: str = "messages") -> RenderedChat:
    """The rendered prompt; any failure of the template is a 400."""
    check_prompt_chars(message_chars(chat.messages), ctx, param)
    timeout = ctx.cfg.server.chat_template_timeout_s
    limit = max_prompt_chars(ctx) or 2**62
    with render_budget(timeout, limit):
        work = asyncio.ensure_future(off_loop(lambda: _render(chat_io, chat, param)))
    try:
        return await asyncio.wait_for(work, timeout + _GRACE_S)
    except asyncio.TimeoutError:
        raise bad_request(f"the chat template did not finish within {timeout} s", param,
                          "invalid_messages") from None


def _render(chat_io: ChatIO, chat: ChatRequest, param: str) -> RenderedChat:
    try:
        return chat_io.render(chat)
    except TemplateRenderError as exc:
        raise bad_request(f"the chat template rejected these messages: {exc}", param,
                          "invalid_messages") from exc
    except OpenAIError:
        raise
    except Exception as exc:  # noqa: BLE001 - a template is code; its failure is the request's
        raise bad_request(f"the chat template failed on these messages: {type(exc).__name__}: "
                          f"{exc}", param, "invalid_messages") from None


async def encode_texts(ctx: Any, texts: list[str], param: str = "prompt") -> list[list[int]]:
    """Token ids of each text (with the tokenizer's special tokens), tokenized off the loop."""
    for i, text in enumerate(texts):
        check_prompt_chars(len(text), ctx, param if len(texts) == 1 else f"{param}[{i}]")
    tok = ctx.tokenizer

    def encode() -> list[list[int]]:
        return [list(tok.encode(t, add_special_tokens=True)) for t in texts]

    if sum(len(t) for t in texts) <= _INLINE_CHARS:
        return encode()
    return await off_loop(encode)


def check_fan_out(num_prompts: int, n: int, ctx: Any, param: Optional[str] = "n") -> None:
    """Each prompt × choice is one engine sequence; one request may not flood the scheduler."""
    cap = ctx.cfg.server.max_sequences_per_request
    if num_prompts * n > cap:
        raise bad_request(f"this request asks for {num_prompts} prompt(s) × n={n} = "
                          f"{num_prompts * n} sequences; at most {cap} are allowed per request",
                          param, "too_many_sequences")
