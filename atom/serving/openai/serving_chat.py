"""POST /v1/chat/completions: messages → template → engine → text → reader → deltas → SSE or JSON.

The text of each choice passes through a `DeltaReader` (chat_reader.py) before it becomes a
delta; that is where the reasoning split and tool-call reading plug in.
"""
from __future__ import annotations

from typing import AsyncIterator, Optional

from litestar import Request, Response
from litestar.response import Stream

from atom.chat.chat_io import ChatIO
from atom.model_engine.engine_client import EngineError
from atom.model_engine.messages import TokenLogprob
from atom.serving.common.context import ServerContext
from atom.serving.common.errors import bad_request, engine_unavailable
from atom.serving.common.generation import Generation, complete_or_abort
from atom.serving.common.prompt_input import check_fan_out, render_chat
from atom.serving.common.sampling import check_model
from atom.serving.common.sse import DONE_FRAME, SSE_HEADERS, data_frame, json_response
from atom.serving.common.streaming_dispatch import client_stream
from atom.serving.openai.chat_messages import chat_request
from atom.serving.openai.chat_reader import DeltaReader, merge_deltas
from atom.serving.openai.protocol import (ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                          ChatCompletionRequest, ChatCompletionResponse,
                                          ChatLogprobs, ChatResponseMessage, ChatTokenLogprob,
                                          DeltaMessage, TopLogprob)
from atom.serving.openai.serving_completion import error_frame
from atom.serving.openai.validation import (check_chat_fields, fit_max_tokens,
                                            refuse_unimplemented, sampling_params)


class OpenAIServingChat:
    def __init__(self, ctx: ServerContext, chat_io: ChatIO) -> None:
        self.ctx = ctx
        self.io = chat_io

    def _top_logprobs(self, req: ChatCompletionRequest) -> Optional[int]:
        if req.logprobs:
            return req.top_logprobs or 0
        if req.top_logprobs is not None:
            raise bad_request("`top_logprobs` requires `logprobs: true`", "top_logprobs")
        return None

    async def create(self, req: ChatCompletionRequest, request: Request, arrival: float) -> Response:
        ctx = self.ctx
        check_model(req.model, ctx.aliases, ctx.model_name)
        refuse_unimplemented(req)
        messages = req.messages if req.messages is not None else req.prompt
        if not messages:
            raise bad_request("`messages` is required and must not be empty", "messages",
                              "missing_required_parameter")
        top = self._top_logprobs(req)
        check_chat_fields(req)
        check_fan_out(1, req.n, ctx)
        if not ctx.client.alive:
            raise engine_unavailable()
        rendered = await render_chat(ctx, self.io, chat_request(req, messages))
        prompt = rendered.token_ids
        max_tokens = fit_max_tokens(req, len(prompt), ctx.max_model_len)
        choices = [(prompt, sampling_params(req, max_tokens, top, j)) for j in range(req.n)]
        readers = [DeltaReader(self.io.reader(rendered)) for _ in range(req.n)]
        rid = ctx.new_id("chatcmpl")
        gen = Generation(ctx, rid, choices, arrival)
        gen.start()
        if req.stream:
            frames = self._stream(gen, req, rid, readers, len(prompt))
            return Stream(client_stream(frames, rid, ctx.watchdog), media_type="text/event-stream",
                          headers=SSE_HEADERS)
        if not await complete_or_abort(gen, request.receive):
            return Response(b"", status_code=499)
        out = []
        for i, (st, reader) in enumerate(zip(gen.states, readers)):
            delta = merge_deltas(reader.feed("".join(st.text)), reader.finish()) or DeltaMessage()
            message = ChatResponseMessage("assistant", delta.content if delta.content is not None else "",
                                          delta.reasoning_content, delta.tool_calls)
            out.append(ChatChoice(i, message, reader.finish_reason or st.finish_reason,
                                  self._logprobs(st.logprobs) if top is not None else None))
        return json_response(ChatCompletionResponse(rid, ctx.created_now(), ctx.model_name, out,
                                                    gen.usage(len(prompt))))

    async def _stream(self, gen: Generation, req: ChatCompletionRequest, rid: str,
                      readers: list[DeltaReader], prompt_tokens: int) -> AsyncIterator[bytes]:
        ctx = self.ctx
        created, model = ctx.created_now(), ctx.model_name
        want_lp = req.logprobs is True

        running_usage = req.stream_options is not None and req.stream_options.continuous_usage_stats

        def chunk(choices: list[ChatChunkChoice]) -> bytes:
            usage = gen.usage(prompt_tokens) if running_usage else None
            return data_frame(ChatCompletionChunk(rid, created, model, choices, usage=usage))

        try:
            # The role chunk goes out with the first output, not before: the wait for the first
            # frame is admission and prefill, which the silence watchdog must not count.
            items = await gen.next()
            for i in range(len(readers)):
                yield chunk([ChatChunkChoice(i, DeltaMessage(role="assistant", content=""))])
            while True:
                for index, out in items:
                    reader = readers[index]
                    delta = reader.feed(out.text) if out.text else None
                    reason = None
                    if out.finished:
                        delta = merge_deltas(delta, reader.finish())
                        reason = reader.finish_reason or out.finish_reason or "stop"
                    lp = self._logprobs(out.logprobs or []) if want_lp and out.logprobs else None
                    if delta is not None or reason is not None or lp is not None:
                        yield chunk([ChatChunkChoice(index, delta or DeltaMessage(), reason, lp)])
                if gen.done:
                    break
                items = await gen.next()
            if req.stream_options is not None and req.stream_options.include_usage:
                yield data_frame(ChatCompletionChunk(rid, created, model, [], usage=gen.usage(prompt_tokens)))
            yield DONE_FRAME
        except EngineError as exc:
            yield error_frame(exc)
            yield DONE_FRAME
        finally:
            gen.close()

    def _logprobs(self, items: list[TokenLogprob]) -> ChatLogprobs:
        text = self.ctx.token_text
        content = []
        for lp in items:
            token = text(lp.token_id)
            tops = [TopLogprob(text(t), v, list(text(t).encode())) for t, v in lp.top]
            content.append(ChatTokenLogprob(token, lp.logprob, list(token.encode()), tops))
        return ChatLogprobs(content)
