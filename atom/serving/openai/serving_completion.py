"""POST /v1/completions: prompt (text or token ids, one or a batch) → text, streamed or whole."""
from __future__ import annotations

from typing import AsyncIterator

from litestar import Request, Response
from litestar.response import Stream

from atom.model_engine.engine_client import EngineError
from atom.model_engine.messages import TokenLogprob
from atom.serving.common.context import ServerContext
from atom.serving.common.errors import bad_request, engine_error, engine_unavailable
from atom.serving.common.generation import Generation, complete_or_abort
from atom.serving.common.prompt_input import check_fan_out, encode_texts
from atom.serving.common.sampling import check_model
from atom.serving.common.sse import DONE_FRAME, SSE_HEADERS, data_frame, json_response
from atom.serving.common.streaming_dispatch import client_stream
from atom.serving.openai.protocol import (CompletionChoice, CompletionLogprobs, CompletionRequest,
                                          CompletionResponse)
from atom.serving.openai.validation import (fit_max_tokens, refuse_unimplemented,
                                            sampling_params)

def error_frame(exc: EngineError) -> bytes:
    """How a stream that cannot finish says so: the SDKs raise on a `data: {"error": ...}` event."""
    return data_frame(engine_error(exc).body())


class OpenAIServingCompletion:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    async def _prompts(self, req: CompletionRequest) -> list[list[int]]:
        p = req.prompt
        if p is None or p == "" or p == []:
            raise bad_request("`prompt` is required", "prompt", "missing_required_parameter")
        count = 1 if isinstance(p, str) or all(isinstance(x, int) for x in p) else len(p)
        check_fan_out(count, req.n, self.ctx)
        if isinstance(p, str):
            return await encode_texts(self.ctx, [p])
        if all(isinstance(x, str) for x in p):
            return await encode_texts(self.ctx, p)  # type: ignore[arg-type]
        if all(isinstance(x, int) for x in p):
            batches: list[list[int]] = [p]  # type: ignore[list-item]
        elif all(isinstance(x, list) for x in p):
            batches = list(p)  # type: ignore[arg-type]
        else:
            raise bad_request("`prompt` must be a string, a list of strings, a list of token ids or "
                              "a list of token-id lists, not a mix", "prompt", "invalid_type")
        vocab = len(self.ctx.tokenizer)
        for ids in batches:
            if not ids or any(not 0 <= t < vocab for t in ids):
                raise bad_request(f"token ids in `prompt` must be in [0, {vocab})", "prompt", "invalid_value")
        return batches

    def _prompt_text(self, ids: list[int], req: CompletionRequest, i: int) -> str:
        p = req.prompt
        if isinstance(p, str):
            return p
        if isinstance(p, list) and p and isinstance(p[0], str):
            return p[i]  # type: ignore[return-value]
        return self.ctx.tokenizer.decode(ids, skip_special_tokens=False)

    async def create(self, req: CompletionRequest, request: Request, arrival: float) -> Response:
        ctx = self.ctx
        check_model(req.model, ctx.aliases, ctx.model_name)
        refuse_unimplemented(req)
        if req.echo and req.logprobs is not None:
            raise bad_request("`echo` together with `logprobs` (prompt logprobs) is not supported",
                              "echo", "unsupported_parameter")
        if not ctx.client.alive:
            raise engine_unavailable()
        prompts = await self._prompts(req)
        choices = []
        for ids in prompts:
            max_tokens = fit_max_tokens(req, len(ids), ctx.max_model_len)
            choices += [(ids, sampling_params(req, max_tokens, req.logprobs, j)) for j in range(req.n)]
        echo = [self._prompt_text(ids, req, i) if req.echo else "" for i, ids in enumerate(prompts)
                for _ in range(req.n)]
        rid = ctx.new_id("cmpl")
        gen = Generation(ctx, rid, choices, arrival)
        gen.start()
        if req.stream:
            frames = self._stream(gen, req, rid, echo, sum(len(p) for p in prompts))
            return Stream(client_stream(frames, rid, ctx.watchdog), media_type="text/event-stream",
                          headers=SSE_HEADERS)
        if not await complete_or_abort(gen, request.receive):
            return Response(b"", status_code=499)
        out = [CompletionChoice(i, echo[i] + "".join(st.text), st.finish_reason,
                                self._logprobs(st.logprobs, len(echo[i])) if req.logprobs is not None else None)
               for i, st in enumerate(gen.states)]
        return json_response(CompletionResponse(rid, ctx.created_now(), ctx.model_name, out,
                                                gen.usage(sum(len(p) for p in prompts))))

    async def _stream(self, gen: Generation, req: CompletionRequest, rid: str, echo: list[str],
                      prompt_tokens: int) -> AsyncIterator[bytes]:
        ctx = self.ctx
        created, model = ctx.created_now(), ctx.model_name
        offsets = [len(e) for e in echo]
        running_usage = req.stream_options is not None and req.stream_options.continuous_usage_stats
        try:
            while not gen.done:
                for index, out in await gen.next():
                    text = out.text
                    if echo[index]:
                        text, echo[index] = echo[index] + text, ""
                    lp = None
                    if req.logprobs is not None:
                        lp = self._logprobs(out.logprobs or [], offsets[index])
                    offsets[index] += len(out.text)
                    yield data_frame(CompletionResponse(rid, created, model, [CompletionChoice(
                        index, text, out.finish_reason if out.finished else None, lp)],
                        gen.usage(prompt_tokens) if running_usage else None))
            if req.stream_options is not None and req.stream_options.include_usage:
                yield data_frame(CompletionResponse(rid, created, model, [], gen.usage(prompt_tokens)))
            yield DONE_FRAME
        except EngineError as exc:
            yield error_frame(exc)
            yield DONE_FRAME
        finally:
            gen.close()

    def _logprobs(self, items: list[TokenLogprob], offset: int) -> CompletionLogprobs:
        text = self.ctx.token_text
        out = CompletionLogprobs()
        for lp in items:
            token = text(lp.token_id)
            out.tokens.append(token)
            out.token_logprobs.append(lp.logprob)
            out.top_logprobs.append({text(t): v for t, v in lp.top} if lp.top else None)
            out.text_offset.append(offset)
            offset += len(token)
        return out
