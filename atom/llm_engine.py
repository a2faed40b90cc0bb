"""`LLMEngine`: the programmatic API of the spec, over one engine core in this process."""
from __future__ import annotations

import itertools
import logging
import time
from typing import Any, Callable, Optional, Union

from tqdm import tqdm

from atom.builder import build_core, build_tokenizer
from atom.config.flags import config_from_kwargs
from atom.config.schema import Config
from atom.model_engine.core_protocol import EngineCoreProtocol
from atom.model_engine.messages import EngineRequest
from atom.model_engine.output_processor import OutputProcessor, RequestOutput
from atom.sampling_params import SamplingParams
from atom.spec_decode.stats import mtp_statistics_text

log = logging.getLogger("atom.engine")

Prompt = Union[str, list[int]]
StreamCallback = Callable[[RequestOutput], None]


class LLMEngine:
    def __init__(self, model: Optional[str] = None, **kwargs: Any) -> None:
        """`LLMEngine(model=..., kv_cache_dtype="fp8", max_num_seqs=64)`: flat engine-arg
        names (the spec's Config field names) mapped onto the same Config tree as everything else."""
        cfg = kwargs.pop("config", None) or config_from_kwargs(model=model, **kwargs)
        self._init(cfg)

    @classmethod
    def from_config(cls, cfg: Config) -> "LLMEngine":
        self = cls.__new__(cls)
        self._init(cfg)
        return self

    def _init(self, cfg: Config) -> None:
        self.config = cfg
        self.tokenizer = build_tokenizer(cfg)
        self.core: EngineCoreProtocol = build_core(cfg, self.tokenizer)
        self.processor = OutputProcessor(self.tokenizer)
        self._ids = itertools.count()
        self._callbacks: dict[str, Optional[StreamCallback]] = {}
        self._texts: dict[str, list[str]] = {}
        self._tokens: dict[str, list[int]] = {}

    # -- requests ---------------------------------------------------------------------------
    def _encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=True))
        return list(prompt)

    def add_request(self, prompt_or_tokens_list: Union[Prompt, list[Prompt]],
                    sampling_params_list: Union[SamplingParams, list[SamplingParams], None] = None,
                    stream_callback: Optional[StreamCallback] = None) -> list[str]:
        prompts = prompt_or_tokens_list
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        params = sampling_params_list or SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        ids = []
        for prompt, sp in zip(prompts, params):
            rid = str(next(self._ids))
            token_ids = self._encode(prompt)
            now = time.perf_counter()
            self.processor.add_request(rid, token_ids, sp, now, stream_text=stream_callback is not None)
            self.core.add_request(EngineRequest(request_id=rid, prompt_token_ids=token_ids,
                                                sampling_params=sp, arrival_time=now))
            self._callbacks[rid] = stream_callback
            self._texts[rid] = []
            self._tokens[rid] = []
            ids.append(rid)
        return ids

    def abort(self, request_id: str) -> None:
        self.core.abort_requests([request_id])
        self.processor.abort(request_id)
        self._callbacks.pop(request_id, None)
        self._texts.pop(request_id, None)
        self._tokens.pop(request_id, None)

    def step(self) -> list[dict]:
        """Run one engine step; return the requests that completed in it (as output dicts)."""
        outputs, to_abort = self.processor.process(self.core.step())
        if to_abort:
            self.core.abort_requests(to_abort)
        finished = []
        for out in outputs:
            self._texts[out.request_id].append(out.text)
            self._tokens[out.request_id].extend(out.token_ids)
            cb = self._callbacks.get(out.request_id)
            if cb is not None:
                cb(out)
            if out.finished:
                finished.append(self._finish(out))
        return finished

    def _finish(self, out: RequestOutput) -> dict:
        self._callbacks.pop(out.request_id, None)
        text = "".join(self._texts.pop(out.request_id, []))
        return {
            "request_id": out.request_id, "text": text, "token_ids": self._tokens.pop(out.request_id, []),
            "latency": out.latency, "finish_reason": out.finish_reason,
            "num_tokens_input": out.num_prompt_tokens, "num_tokens_output": out.num_output_tokens,
            "ttft": out.ttft, "tpot": out.tpot, "num_cached_tokens": out.num_cached_tokens,
            "error": out.error,
        }

    def is_finished(self) -> bool:
        return not self.core.has_unfinished()

    def generate(self, prompts: list[Prompt], sampling_params: Union[SamplingParams,
                 list[SamplingParams], None] = None, use_tqdm: bool = False) -> list[dict]:
        """Blocking batch generation; outputs in prompt order."""
        ids = self.add_request(prompts, sampling_params)
        results: dict[str, dict] = {}
        bar = tqdm(total=len(ids), desc="generate", disable=not use_tqdm)
        while len(results) < len(ids):
            for done in self.step():
                results[done["request_id"]] = done
                bar.update(1)
        bar.close()
        return [results[i] for i in ids]

    # -- tools ---------------------------------------------------------------------------------
    def stats(self):
        return self.core.stats()

    def start_profile(self) -> None:
        self.core.start_profile()

    def stop_profile(self) -> None:
        self.core.stop_profile()

    def print_mtp_statistics(self) -> None:
        """The spec's acceptance block (atom/spec_decode/stats.py), from the core's counters."""
        print(mtp_statistics_text(self.core.stats()))

    def shutdown(self) -> None:
        self.core.shutdown()


def build_engine(cfg: Config) -> LLMEngine:
    """`atom.build_engine(cfg)`: an in-process LLMEngine over a core built from cfg."""
    return LLMEngine.from_config(cfg)
