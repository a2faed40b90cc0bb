"""One client request in flight: its engine sequences (one per choice), one collector, cleanup.

Whatever way a handler exits — finished, client gone, engine dead, cancelled — `close()` aborts
every sequence still running, so the core frees its KV blocks on its next step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from atom.model_engine.engine_client import EngineCoreDead, EngineError
from atom.model_engine.messages import TokenLogprob
from atom.model_engine.output_processor import RequestOutput
from atom.sampling_params import SamplingParams
from atom.serving.common.errors import engine_error, engine_unavailable
from atom.serving.common.streaming_dispatch import StreamOutputCollector
from atom.serving.common.usage import PromptTokensDetails, UsageInfo

if TYPE_CHECKING:
    from atom.serving.common.context import ServerContext


@dataclass
class ChoiceState:
    prompt_len: int
    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: Optional[str] = None
    last: Optional[RequestOutput] = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class Generation:
    def __init__(self, ctx: "ServerContext", request_id: str,
                 choices: list[tuple[list[int], SamplingParams]], arrival: Optional[float] = None) -> None:
        import asyncio

        self.ctx = ctx
        self.request_id = request_id
        self.arrival = arrival if arrival is not None else time.perf_counter()
        self._choices = choices
        self.states = [ChoiceState(len(p)) for p, _ in choices]
        self._collector = StreamOutputCollector(asyncio.get_running_loop())
        self._engine_ids = [f"{request_id}-{i}" for i in range(len(choices))]
        self._submitted = 0  # choices registered (and perhaps half-added) so far
        self._counted = False

    def start(self) -> None:
        """Submit every choice. Whatever fails part-way (a dead core, a message that does not
        encode) releases what was already registered — collector routes and the output
        processor's per-request state included — before the error goes on."""
        dispatcher = self.ctx.dispatcher
        assert dispatcher is not None, "the app is not started"
        try:
            for i, (prompt, params) in enumerate(self._choices):
                dispatcher.register(self._engine_ids[i], self._collector, i)
                self._submitted = i + 1
                self.ctx.client.add_request(self._engine_ids[i], prompt, params, self.arrival)
        except EngineCoreDead as exc:
            self.close()
            raise engine_unavailable(str(exc)) from exc
        except BaseException:
            self.close()
            raise
        self.ctx.metrics.request_started()
        self._counted = True

    @property
    def done(self) -> bool:
        return all(s.finished for s in self.states)

    async def next(self) -> list[tuple[int, RequestOutput]]:
        """The next chunk of every choice that advanced; raises an EngineError if the engine failed it."""
        items = await self._collector.get()
        for index, out in items:
            st = self.states[index]
            st.text.append(out.text)
            st.token_ids.extend(out.token_ids)
            if out.logprobs:
                st.logprobs.extend(out.logprobs)
            st.last = out
            if out.finished:
                st.finish_reason = out.finish_reason or "stop"
                self.ctx.metrics.request_finished(out)
        return items

    async def run_to_end(self) -> None:
        while not self.done:
            await self.next()

    def close(self) -> None:
        dispatcher = self.ctx.dispatcher
        live = [eid for eid, st in zip(self._engine_ids[:self._submitted], self.states)
                if not st.finished]
        if dispatcher is not None:
            for eid in live:
                dispatcher.unregister(eid)
        if live:
            self.ctx.client.abort(live)
            self.ctx.metrics.request_aborted(len(live))
        self._submitted = 0
        if self._counted:
            self._counted = False
            self.ctx.metrics.request_done()

    def usage(self, prompt_tokens: Optional[int] = None) -> UsageInfo:
        """OpenAI usage plus the spec's timing fields (seconds, from arrival at the server)."""
        prompts = prompt_tokens if prompt_tokens is not None else sum(
            {id(p): len(p) for p, _ in self._choices}.values())
        completion = sum(len(s.token_ids) for s in self.states)
        lasts = [s.last for s in self.states if s.last is not None]
        firsts = [o.first_token_time for o in lasts if o.first_token_time]
        ends = [o.finish_time or time.perf_counter() for o in lasts]
        tpots = [o.tpot for o in lasts]
        cached = max((o.num_cached_tokens for o in lasts), default=0)
        return UsageInfo(
            prompt_tokens=prompts, completion_tokens=completion, total_tokens=prompts + completion,
            ttft_s=round(min(firsts) - self.arrival, 6) if firsts else 0.0,
            tpot_s=round(sum(tpots) / len(tpots), 6) if tpots else 0.0,
            latency_s=round((max(ends) if ends else time.perf_counter()) - self.arrival, 6),
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


async def run_unless_disconnected(gen: Generation, receive) -> bool:
    """Run a non-streaming generation to its end unless the client goes away first (then the
    caller's `close()` aborts it). Returns whether it finished."""
    import asyncio

    work = asyncio.ensure_future(gen.run_to_end())
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not work.done():
            work.cancel()
    if work in done:
        work.result()
        return True
    return False


async def complete_or_abort(gen: Generation, receive) -> bool:
    """The whole non-streaming path of every endpoint: run to the end, abort on disconnect,
    turn a dead engine core into a 503 (a request the engine failed alone into a 500), and
    always release the generation."""
    try:
        return await run_unless_disconnected(gen, receive)
    except EngineError as exc:
        raise engine_error(exc) from exc
    finally:
        gen.close()
