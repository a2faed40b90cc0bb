"""A stand-in engine core that emits tokens at a fixed rate: measures the serving layer alone.

It keeps the parts of a real core the server can observe — admission up to `max_num_seqs`, a KV
block pool that fills and frees (so abort-frees-blocks is testable), per-step batching, stats — and
replaces the model with a clock: one token per running request every `1 / rate` seconds.
"""
from __future__ import annotations

import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from atom.config.schema import Config
from atom.model_engine.messages import EngineRequest, EngineStats, StepOutput, TokenLogprob

_DEFAULT_KV_BLOCKS = 65536
_DEFAULT_MAX_MODEL_LEN = 4096


@dataclass
class _Seq:
    req: EngineRequest
    blocks: int = 0
    emitted: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.req.prompt_token_ids) + len(self.emitted)


def default_token_ids(cfg: Config) -> list[int]:
    """Ids this model's tokenizer decodes to whole characters: the configured ones, else a band
    well inside the vocabulary (clear of the special tokens that sit at the ends)."""
    if cfg.server.synthetic_token_ids:
        return list(cfg.server.synthetic_token_ids)
    # A separate tokenizer (model.tokenizer) has its own vocabulary, which hf_config does not describe.
    vocab = 0 if cfg.model.tokenizer else int(cfg.model.hf_config.get("vocab_size", 0) or 0)
    if 0 < vocab <= 4000:  # a tiny test vocabulary, typically the byte-level stand-in: ASCII letters
        return list(range(97, 123))
    return list(range(1000, 1064))


def max_model_len_of(cfg: Config) -> int:
    return int(cfg.model.max_model_len or cfg.model.hf_config.get("max_position_embeddings")
               or _DEFAULT_MAX_MODEL_LEN)


class SyntheticEngineCore:
    """EngineCoreProtocol over a clock instead of a model."""

    def __init__(self, cfg: Config, tokens_per_s: Optional[float] = None) -> None:
        self.cfg = cfg
        rate = cfg.server.synthetic_tokens_per_s if tokens_per_s is None else tokens_per_s
        self._tick = 1.0 / rate if rate > 0 else 0.0
        self._next_step = 0.0
        self._block_size = cfg.kv_cache.block_size
        self._blocks_total = cfg.kv_cache.num_blocks or _DEFAULT_KV_BLOCKS
        self._blocks_free = self._blocks_total
        self._max_seqs = cfg.scheduler.max_num_seqs
        self.max_model_len = max_model_len_of(cfg)
        self._tokens = default_token_ids(cfg)
        self._waiting: deque[_Seq] = deque()
        self._running: dict[str, _Seq] = {}
        self._stats = EngineStats(kv_blocks_total=self._blocks_total, kv_blocks_free=self._blocks_free)
        self._profiler: Any = None

    # -- protocol -------------------------------------------------------------------------------
    def add_request(self, request: EngineRequest) -> None:
        self._waiting.append(_Seq(request))

    def abort_requests(self, request_ids: list[str]) -> None:
        ids = set(request_ids)
        for rid in ids:
            seq = self._running.pop(rid, None)
            if seq is not None:
                self._free(seq)
        if any(s.req.request_id in ids for s in self._waiting):
            self._waiting = deque(s for s in self._waiting if s.req.request_id not in ids)

    def has_unfinished(self) -> bool:
        return bool(self._running or self._waiting)

    def step(self) -> list[StepOutput]:
        self._pace()
        self._admit()
        outputs = [self._advance(seq) for seq in list(self._running.values())]
        self._stats.num_steps += 1
        return outputs

    def stats(self) -> EngineStats:
        s = self._stats
        s.num_running, s.num_waiting, s.kv_blocks_free = len(self._running), len(self._waiting), self._blocks_free
        return s

    def start_profile(self) -> None:
        self._profiler = start_torch_profiler(self.cfg)

    def stop_profile(self) -> None:
        prof, self._profiler = self._profiler, None
        if prof is not None:
            prof.stop()

    def shutdown(self) -> None:
        self._running.clear()
        self._waiting.clear()

    # -- the token source (overridden by the scripted core) --------------------------------------
    def next_token(self, seq: _Seq) -> tuple[int, Optional[str]]:
        """The next token and, if this token ends the sequence, why."""
        token = self._tokens[len(seq.emitted) % len(self._tokens)]
        stop_ids = seq.req.sampling_params.stop_token_ids
        return token, ("stop" if stop_ids and token in stop_ids else None)

    # -- internals -------------------------------------------------------------------------------
    def _pace(self) -> None:
        """Sleep out the rest of this step so tokens arrive at the configured rate; a step that
        ran late starts the next one now instead of bursting to catch up."""
        if self._tick <= 0:
            return
        now = time.monotonic()
        if now < self._next_step:
            time.sleep(self._next_step - now)
            now = self._next_step
        self._next_step = now + self._tick

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self._max_seqs:
            seq = self._waiting[0]
            need = math.ceil((len(seq.req.prompt_token_ids) + 1) / self._block_size)
            if need > self._blocks_free:
                break
            self._waiting.popleft()
            seq.blocks = need
            self._blocks_free -= need
            self._stats.prompt_tokens_total += len(seq.req.prompt_token_ids)
            self._stats.prefix_cache_queries += need
            self._running[seq.req.request_id] = seq

    def _advance(self, seq: _Seq) -> StepOutput:
        token, reason = self.next_token(seq)
        seq.emitted.append(token)
        self._stats.generation_tokens_total += 1
        need = math.ceil(seq.length / self._block_size)
        if need > seq.blocks and self._blocks_free > 0:
            self._blocks_free -= need - seq.blocks
            seq.blocks = need
        params = seq.req.sampling_params
        if reason is None and len(seq.emitted) >= params.max_tokens:
            reason = "length"
        if reason is None and seq.length >= self.max_model_len:
            reason = "length"
        finished = reason is not None
        if finished:
            self._running.pop(seq.req.request_id, None)
            self._free(seq)
        logprobs = None
        if params.logprobs is not None:
            top = [(token, -0.25)] + [(t, -2.0 - i) for i, t in enumerate(self._tokens[:params.logprobs])
                                      if t != token][: max(params.logprobs - 1, 0)]
            logprobs = [TokenLogprob(token, -0.25, top[: params.logprobs])]
        return StepOutput(request_id=seq.req.request_id, new_token_ids=[token], finished=finished,
                          finish_reason=reason, num_prompt_tokens=len(seq.req.prompt_token_ids),
                          logprobs=logprobs)

    def _free(self, seq: _Seq) -> None:
        self._blocks_free += seq.blocks
        seq.blocks = 0


def start_torch_profiler(cfg: Config) -> Any:
    """A torch profiler writing gzip TensorBoard traces under `<dir>/rank_0/`, the spec's layout;
    ATOM_PROFILER_MORE=1 adds shapes, stacks and memory."""
    directory = cfg.profiler.torch_profiler_dir
    if not directory:
        raise RuntimeError("no profiler directory configured (--torch-profiler-dir or "
                           "ATOM_TORCH_PROFILER_DIR)")
    import torch

    more = os.environ.get("ATOM_PROFILER_MORE", "0") == "1"
    out = os.path.join(directory, "rank_0")
    os.makedirs(out, exist_ok=True)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=more, with_stack=more,
        profile_memory=more, on_trace_ready=torch.profiler.tensorboard_trace_handler(out, use_gzip=True))
    prof.start()
    return prof
