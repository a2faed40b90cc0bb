"""Turns engine-core token outputs into text outputs: detokenize, match stop strings, time.

Runs on the caller's side of the core (in-process for LLMEngine, in the API process for the
server), so the core's busy loop spends no time on text. A stop-string hit is reported back as
an abort so the core frees the sequence's KV blocks in its next step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from atom.model_engine.detokenizer import IncrementalDetokenizer
from atom.model_engine.messages import StepOutput, TokenLogprob
from atom.model_engine.stop_strings import StopStringMatcher
from atom.sampling_params import SamplingParams


@dataclass
class RequestOutput:
    """One request's progress: the text and tokens new since the last output, and its timing."""

    request_id: str
    text: str  # delta
    token_ids: list[int]  # delta
    finished: bool
    finish_reason: Optional[str]
    num_prompt_tokens: int
    num_output_tokens: int
    arrival_time: float
    first_token_time: Optional[float]
    finish_time: Optional[float]
    num_cached_tokens: int = 0
    logprobs: Optional[list[TokenLogprob]] = None
    error: Optional[str] = None  # the engine failed this request (finish_reason "error")
    rejected: bool = False  # ... refusing it before it ran

    @property
    def ttft(self) -> float:
        return (self.first_token_time - self.arrival_time) if self.first_token_time else 0.0

    @property
    def latency(self) -> float:
        end = self.finish_time or time.perf_counter()
        return end - self.arrival_time

    @property
    def tpot(self) -> float:
        if self.num_output_tokens <= 1 or self.first_token_time is None:
            return 0.0
        end = self.finish_time or time.perf_counter()
        return (end - self.first_token_time) / (self.num_output_tokens - 1)


@dataclass
class RequestState:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float
    detok: Optional[IncrementalDetokenizer]
    stops: StopStringMatcher
    output_token_ids: list[int] = field(default_factory=list)
    released: int = 0  # characters of stops.text handed out so far
    first_token_time: Optional[float] = None
    num_cached_tokens: int = 0
    decode_at_end: bool = False
    quiet: bool = False  # report only when finished (all tokens and text at once)

    @property
    def text(self) -> str:
        return self.stops.text


class OutputProcessor:
    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self.states: dict[str, RequestState] = {}

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    arrival_time: Optional[float] = None, stream_text: bool = True) -> None:
        """`stream_text=False`: the caller wants the result only at the end, so a request without
        stop strings is decoded once when it finishes instead of token by token, and (without
        logprobs) gets one output at the end rather than one per step: at hundreds of
        sequences per step, building per-step outputs nobody reads cost the offline engine
        milliseconds of every step."""
        incremental = stream_text or bool(params.stop_strings)
        detok = (IncrementalDetokenizer(self._tok, prompt_token_ids, params.skip_special_tokens)
                 if self._tok is not None and incremental else None)
        st = RequestState(
            request_id, list(prompt_token_ids), params,
            arrival_time if arrival_time is not None else time.perf_counter(), detok,
            StopStringMatcher(params.stop_strings, params.include_stop_str_in_output))
        st.decode_at_end = self._tok is not None and not incremental
        st.quiet = not stream_text and params.logprobs is None
        self.states[request_id] = st

    def abort(self, request_id: str) -> Optional[RequestOutput]:
        st = self.states.pop(request_id, None)
        if st is None:
            return None
        return self._emit(st, [], True, "abort", None)

    def process(self, outputs: list[StepOutput]) -> tuple[list[RequestOutput], list[str]]:
        """Returns this step's outputs and the request ids the core must abort (stop strings)."""
        results: list[RequestOutput] = []
        to_abort: list[str] = []
        now = time.perf_counter()
        for o in outputs:
            st = self.states.get(o.request_id)
            if st is None:
                continue
            if o.new_token_ids and st.first_token_time is None:
                st.first_token_time = now
            st.num_cached_tokens = o.num_cached_tokens
            new_ids = o.new_token_ids
            if st.detok is not None and not st.stops.stopped:
                st.output_token_ids.extend(new_ids)
                delta = st.detok.push(new_ids)
                if o.finished:
                    delta += st.detok.flush()
                st.stops.feed(delta)
            else:
                st.output_token_ids.extend(new_ids)
                if o.finished and st.decode_at_end:
                    st.stops.feed(self._tok.decode(st.output_token_ids,
                                                   skip_special_tokens=st.params.skip_special_tokens))
            finished, reason = o.finished, o.finish_reason
            if st.stops.stopped and not o.finished:
                finished, reason = True, "stop"
                to_abort.append(o.request_id)
            elif st.stops.stopped:
                reason = "stop"
            if st.quiet and not finished:
                continue
            out = self._emit(st, st.output_token_ids if st.quiet else new_ids, finished, reason,
                             o.logprobs, now)
            out.error, out.rejected = o.error, o.rejected
            results.append(out)
            if finished:
                self.states.pop(o.request_id, None)
        return results, to_abort

    def _emit(self, st: RequestState, new_ids: list[int], finished: bool, reason: Optional[str],
              logprobs: Optional[list[TokenLogprob]], now: Optional[float] = None) -> RequestOutput:
        upto = st.stops.releasable(final=finished)
        delta = st.stops.text[st.released:upto]
        st.released = max(st.released, upto)
        return RequestOutput(
            request_id=st.request_id, text=delta, token_ids=list(new_ids), finished=finished,
            finish_reason=reason, num_prompt_tokens=len(st.prompt_token_ids),
            num_output_tokens=len(st.output_token_ids), arrival_time=st.arrival_time,
            first_token_time=st.first_token_time,
            finish_time=(now or time.perf_counter()) if finished else None,
            num_cached_tokens=st.num_cached_tokens, logprobs=logprobs)
