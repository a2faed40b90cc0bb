"""`parallel.data_parallel_size` engine cores behind one API process.

Each core is a whole EngineClient (its own process, devices — tensor_parallel_size ranks of its
own — and KV cache, its own reader thread into the same dispatcher). A request goes to the core with the fewest requests in flight from
this process — the API side knows that count exactly and at once, where a core's stats are one
step old — and the most free KV blocks among those tied. What the app reads (liveness, stats,
silence) is the whole: alive while every core is, stats summed.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from atom.config.schema import Config
from atom.model_engine.engine_client import EngineClient
from atom.model_engine.messages import EngineStats
from atom.sampling_params import SamplingParams


def replica_config(cfg: Config, rank: int) -> Config:
    """One replica's config: a single-core engine with its own tensor_parallel_size ranks (its
    own torch.distributed group), on GPUs rank*tp .. rank*tp+tp-1 when there are GPUs: the
    device names the first, and each rank takes the next (atom/executor/worker.py). Its index
    names its ranks' profiler folders (dp{rank}_tp{r})."""
    parallel = dataclasses.replace(cfg.parallel, data_parallel_size=1, data_parallel_rank=rank)
    runtime = cfg.runtime
    if runtime.device in ("auto", "cuda") and _cuda():
        runtime = dataclasses.replace(
            runtime, device=f"cuda:{rank * cfg.parallel.tensor_parallel_size}")
    return dataclasses.replace(cfg, parallel=parallel, runtime=runtime)


class DataParallelEngineClient:
    def __init__(self, cfg: Config, size: int, core_main: Callable[..., None]) -> None:
        self.cfg = cfg
        self.clients = [EngineClient(replica_config(cfg, r), core_main=core_main)
                        for r in range(size)]
        self.max_model_len = 0

    # -- lifecycle --------------------------------------------------------------------------
    def launch(self) -> None:
        for c in self.clients:
            c.launch()

    def wait_ready(self) -> "DataParallelEngineClient":
        for c in self.clients:
            c.wait_ready()
        self.max_model_len = min(c.max_model_len for c in self.clients)
        return self

    def set_tokenizer(self, tokenizer: Any) -> None:
        for c in self.clients:
            c.set_tokenizer(tokenizer)

    @property
    def tokenizer(self) -> Any:
        return self.clients[0].tokenizer

    def attach(self, dispatcher: Any) -> None:
        for c in self.clients:
            c.attach(dispatcher)

    def close(self) -> None:
        for c in self.clients:
            c.close()

    # -- what the app reads -------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return all(c.alive for c in self.clients)

    @property
    def dead_reason(self) -> Optional[str]:
        return next((c.dead_reason for c in self.clients if c.dead_reason), None)

    @property
    def stalled(self) -> bool:
        return any(c.stalled for c in self.clients)

    def silence_s(self) -> float:
        return max(c.silence_s() for c in self.clients)

    @property
    def stats(self) -> EngineStats:
        return EngineStats.total([c.stats for c in self.clients])

    # -- requests -----------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    arrival_time: float) -> None:
        self._least_loaded().add_request(request_id, prompt_token_ids, params, arrival_time)

    def _least_loaded(self) -> EngineClient:
        return min(self.clients, key=lambda c: (len(c.processor.states), -c.stats.kv_blocks_free))

    def abort(self, request_ids: list[str]) -> None:
        for c in self.clients:
            mine = [r for r in request_ids if r in c.processor.states]
            if mine:
                c.abort(mine)

    async def call(self, op: str, timeout_s: float) -> None:
        for c in self.clients:
            await c.call(op, timeout_s)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()

