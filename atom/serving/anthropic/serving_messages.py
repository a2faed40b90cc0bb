"""POST /v1/messages: the Anthropic Messages API over the same template, engine and reader.

The request is translated into the chat path's terms (messages, tools, tool_choice, template
kwargs) and read by the same `ResponseReader`, so text, thinking and tool_use blocks are the same
bytes /v1/chat/completions would deliver as content, reasoning_content and tool_calls.

Two rules particular to this wire:
- a `tool_use` block opens when its arguments arrive, not when the name does: its
  content_block_start carries `"input": {}`, which on its own is a complete zero-argument call;
- `thinking: {"type": "disabled"}` is answered in the prompt through the template's switch; only
  a template without one has its thinking blocks withheld instead. An absent `thinking` leaves the
  model's default alone.
"""
from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator, Optional, Union

from litestar import Request, Response, post
from litestar.response import Stream

from atom.chat.chat_io import ChatIO, ChatRequest
from atom.chat.tool_parser.events import (
    ContentDelta, Event, ReasoningDelta, ToolCallArgs, ToolCallStart)
from atom.model_engine.engine_client import EngineError
from atom.serving.anthropic.errors import handle_anthropic_error
from atom.serving.anthropic.protocol import (
    ContentBlock, MessagesRequest, PlainTextBlock, TextBlock, ThinkingBlock, ThinkingDisabled,
    ThinkingEnabled, ToolChoice, ToolChoiceAny, ToolChoiceNone, ToolChoiceTool, ToolParam,
    ToolResultBlock, ToolUseBlock)
from atom.serving.common.errors import bad_request, engine_error, engine_unavailable
from atom.serving.common.generation import Generation, complete_or_abort
from atom.serving.common.prompt_input import render_chat
from atom.serving.common.request_body import decode_body
from atom.serving.common.sampling import check_model, fit_max_tokens, sampling_params
from atom.serving.common.sse import SSE_HEADERS, event_frame, json_response
from atom.serving.common.streaming_dispatch import client_stream

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "abort": "end_turn"}


# --- request translation -----------------------------------------------------------------------

def _text_of(content: Union[str, list[PlainTextBlock], None]) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content or ())


def chat_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """Anthropic turns as chat-template messages: tool_result blocks become tool messages,
    tool_use blocks tool_calls, thinking blocks reasoning_content."""
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": _text_of(req.system)})
    for m in req.messages:
        blocks = [TextBlock(m.content)] if isinstance(m.content, str) else m.content
        if m.role == "user":
            out.extend(_user_turn(blocks))
        else:
            out.append(_assistant_turn(blocks))
    return out


def _user_turn(blocks: list[ContentBlock]) -> list[dict[str, Any]]:
    turn: list[dict[str, Any]] = []
    text = []
    for b in blocks:
        if isinstance(b, ToolResultBlock):
            turn.append({"role": "tool", "content": _text_of(b.content),
                         "tool_call_id": b.tool_use_id})
        elif isinstance(b, TextBlock):
            text.append(b.text)
    if text or not turn:
        turn.append({"role": "user", "content": "".join(text)})
    return turn


def _assistant_turn(blocks: list[ContentBlock]) -> dict[str, Any]:
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    thinking = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    calls = [{"id": b.id, "type": "function",
              "function": {"name": b.name, "arguments": json.dumps(b.input)}}
             for b in blocks if isinstance(b, ToolUseBlock)]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["reasoning_content"] = thinking
    return message


def template_tools(tools: Optional[list[ToolParam]]) -> Optional[list[dict[str, Any]]]:
    """Anthropic tools in the function-tool shape chat templates take."""
    if not tools:
        return None
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description or "",
        "parameters": t.input_schema or {"type": "object", "properties": {}}}}
        for t in tools]


def template_tool_choice(choice: Optional[ToolChoice]) -> Union[str, dict[str, Any], None]:
    if choice is None:
        return None
    if isinstance(choice, ToolChoiceTool):
        return {"type": "function", "function": {"name": choice.name}}
    return {ToolChoiceAny: "required", ToolChoiceNone: "none"}.get(type(choice), "auto")


def check_tools(req: MessagesRequest) -> None:
    """Schemas must be JSON Schema objects and a named tool_choice must name a declared tool."""
    names = set()
    for i, t in enumerate(req.tools or []):
        if t.input_schema.get("type", "object") != "object":
            raise bad_request("`input_schema` must be a JSON Schema object "
                              "(`{\"type\": \"object\", ...}`)", f"tools[{i}].input_schema",
                              "invalid_value")
        names.add(t.name)
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceTool) and choice.name not in names:
        raise bad_request(f"`tool_choice` names `{choice.name}`, which is not among the declared "
                          "tools", "tool_choice.name", "invalid_value")
    if isinstance(choice, ToolChoiceAny) and not names:
        raise bad_request("`tool_choice: any` needs `tools`", "tool_choice", "invalid_value")


def thinking_disabled(thinking: Union[ThinkingEnabled, ThinkingDisabled, None]) -> Optional[bool]:
    """None when the client said nothing: the model's default stands."""
    if thinking is None:
        return None
    return isinstance(thinking, ThinkingDisabled)


# --- response assembly -------------------------------------------------------------------------

class BlockWriter:
    """Turns reader events into Anthropic content blocks, for either delivery mode."""

    def __init__(self, withhold_thinking: bool) -> None:
        self.withhold_thinking = withhold_thinking
        self.blocks: list[dict[str, Any]] = []
        self.open_type: Optional[str] = None
        self.names: dict[int, tuple[str, str]] = {}
        self.used_tools = False

    def events(self, events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
        """The SSE events these reader events make, in order; `blocks` accumulates too."""
        out: list[tuple[str, dict[str, Any]]] = []
        for e in events:
            if isinstance(e, ReasoningDelta) and not self.withhold_thinking:
                self._ensure(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
                self.blocks[-1]["thinking"] += e.text
                out.append(self._delta({"type": "thinking_delta", "thinking": e.text}))
            elif isinstance(e, ContentDelta):
                self._ensure(out, "text", {"type": "text", "text": ""})
                self.blocks[-1]["text"] += e.text
                out.append(self._delta({"type": "text_delta", "text": e.text}))
            elif isinstance(e, ToolCallStart):
                self.names[e.index] = (e.id, e.name)
            elif isinstance(e, ToolCallArgs):
                self._tool_use(out, e)
        return out

    def close(self) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if not self.blocks:
            self._ensure(out, "text", {"type": "text", "text": ""})
        self._close(out)
        return out

    def _tool_use(self, out: list[tuple[str, dict[str, Any]]], e: ToolCallArgs) -> None:
        call_id, name = self.names[e.index]
        try:
            value = json.loads(e.arguments)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):  # raw text the model wrote: no tool_use input can hold it
            out.extend(self.events([ContentDelta(e.arguments)]))
            return
        self._close(out)
        self.used_tools = True
        self.blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": value})
        out.append(("content_block_start", {"type": "content_block_start",
                                            "index": len(self.blocks) - 1,
                                            "content_block": {"type": "tool_use", "id": call_id,
                                                              "name": name, "input": {}}}))
        out.append(self._delta({"type": "input_json_delta", "partial_json": e.arguments}))
        self._close(out, force=True)

    def _ensure(self, out, kind: str, block: dict[str, Any]) -> None:
        if self.open_type == kind:
            return
        self._close(out)
        self.blocks.append(dict(block))
        self.open_type = kind
        out.append(("content_block_start", {"type": "content_block_start",
                                            "index": len(self.blocks) - 1,
                                            "content_block": dict(block)}))

    def _close(self, out, force: bool = False) -> None:
        if self.open_type is not None or force:
            out.append(("content_block_stop", {"type": "content_block_stop",
                                               "index": len(self.blocks) - 1}))
        self.open_type = None

    def _delta(self, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return ("content_block_delta", {"type": "content_block_delta",
                                        "index": len(self.blocks) - 1, "delta": delta})

    def stop_reason(self, engine_reason: Optional[str]) -> str:
        if self.used_tools:
            return "tool_use"
        return _STOP_REASONS.get(engine_reason or "stop", "end_turn")


# --- the endpoint ------------------------------------------------------------------------------

class ServingMessages:
    def __init__(self, ctx: Any, chat_io: ChatIO) -> None:
        self.ctx = ctx
        self.io = chat_io

    def _chat_request(self, req: MessagesRequest) -> ChatRequest:
        kwargs: dict[str, Any] = {}
        off = thinking_disabled(req.thinking)
        switch = self.io.formats.thinking_switch
        if off is not None and switch is not None:
            kwargs.update(switch.kwargs(not off))
        return ChatRequest(chat_messages(req), template_tools(req.tools),
                           template_tool_choice(req.tool_choice), True, kwargs)

    async def create(self, req: MessagesRequest, request: Request, arrival: float) -> Response:
        ctx = self.ctx
        check_model(req.model, ctx.aliases, ctx.model_name)
        check_tools(req)
        chat = self._chat_request(req)
        if not ctx.client.alive:
            raise engine_unavailable()
        rendered = await render_chat(ctx, self.io, chat)
        prompt = rendered.token_ids
        max_tokens = fit_max_tokens(req.max_tokens, len(prompt), ctx.max_model_len, "messages")
        reader = self.io.reader(rendered)
        withhold = thinking_disabled(req.thinking) is True and \
            self.io.formats.thinking_switch is None
        writer = BlockWriter(withhold)
        rid = ctx.new_id("msg")
        params = sampling_params(max_tokens=max_tokens, temperature=req.temperature,
                                 top_p=req.top_p, top_k=req.top_k, stop=req.stop_sequences)
        gen = Generation(ctx, rid, [(prompt, params)], arrival)
        gen.start()
        if req.stream:
            frames = self._stream(gen, req, rid, reader, writer, len(prompt))
            return Stream(client_stream(frames, rid, ctx.watchdog),
                          media_type="text/event-stream", headers=SSE_HEADERS)
        if not await complete_or_abort(gen, request.receive):
            return Response(b"", status_code=499)
        st = gen.states[0]
        writer.events(reader.feed("".join(st.text)) + reader.finish())
        writer.close()
        usage = gen.usage(len(prompt))
        return json_response({
            "id": rid, "type": "message", "role": "assistant", "model": ctx.model_name,
            "content": writer.blocks, "stop_reason": writer.stop_reason(st.finish_reason),
            "stop_sequence": None,
            "usage": {"input_tokens": usage.prompt_tokens,
                      "output_tokens": usage.completion_tokens}})

    async def _stream(self, gen: Generation, req: MessagesRequest, rid: str, reader: Any,
                      writer: BlockWriter, prompt_tokens: int) -> AsyncIterator[bytes]:
        def frames(pairs):
            return b"".join(event_frame(name, body) for name, body in pairs)

        try:
            items = await gen.next()
            yield event_frame("message_start", {"type": "message_start", "message": {
                "id": rid, "type": "message", "role": "assistant", "model": self.ctx.model_name,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": 0}}})
            while True:
                for _, out in items:
                    events = reader.feed(out.text) if out.text else []
                    if out.finished:
                        events += reader.finish()
                    pairs = writer.events(events)
                    if pairs:
                        yield frames(pairs)
                if gen.done:
                    break
                items = await gen.next()
            usage = gen.usage(prompt_tokens)
            tail = writer.close() + [
                ("message_delta", {"type": "message_delta", "delta": {
                    "stop_reason": writer.stop_reason(gen.states[0].finish_reason),
                    "stop_sequence": None},
                    "usage": {"output_tokens": usage.completion_tokens}}),
                ("message_stop", {"type": "message_stop"})]
            yield frames(tail)
        except EngineError as exc:
            err = engine_error(exc)
            kind = {400: "invalid_request_error", 503: "overloaded_error"}.get(err.status, "api_error")
            yield event_frame("error", {"type": "error", "error": {"type": kind,
                                                                   "message": err.message}})
        finally:
            gen.close()


def messages_handler(ctx: Any, chat_io: ChatIO):
    """The route, for `create_app` to register under /v1."""
    serving = ServingMessages(ctx, chat_io)

    @post("/messages", status_code=200, exception_handlers={Exception: handle_anthropic_error})
    async def messages(request: Request) -> Response:
        arrival = time.perf_counter()
        return await serving.create(decode_body(await request.body(), MessagesRequest), request,
                                    arrival)

    return messages

