"""A request the engine core refuses fails alone across the real IPC: the API-side EngineClient
against a real core process running a tiny random llama.

The request carries a sampling value that only the core's own checks see (NaN temperature, set
after the API-side validation, as a validation gap would let through): the core must refuse it
by id — an error output that the collector turns into RequestFailed — and serve the rest.
"""
from __future__ import annotations

import asyncio
import time

import pytest

from atom.config.compose import compose
from atom.core_process import run_core
from atom.model_engine.engine_client import EngineClient, RequestFailed
from atom.sampling_params import SamplingParams
from atom.serving.common.errors import engine_error
from atom.serving.common.streaming_dispatch import StreamBatchDispatcher, StreamOutputCollector

PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13], [40, 41]]


async def _generate(client: EngineClient, params: list[SamplingParams]) -> list[object]:
    loop = asyncio.get_running_loop()
    dispatcher = StreamBatchDispatcher(loop)
    client.attach(dispatcher)
    collectors = []
    for i, (prompt, sp) in enumerate(zip(PROMPTS * 2, params)):
        col = StreamOutputCollector(loop)
        dispatcher.register(f"r{i}", col)
        client.add_request(f"r{i}", prompt, sp, time.perf_counter())
        collectors.append(col)

    async def drain(col: StreamOutputCollector) -> object:
        tokens: list[int] = []
        try:
            while True:
                for _, out in await col.get():
                    tokens += out.token_ids
                    if out.finished:
                        return tokens
        except RequestFailed as exc:
            return exc

    return await asyncio.wait_for(asyncio.gather(*(drain(c) for c in collectors)), 120)


def test_a_request_the_core_refuses_fails_alone_over_ipc():
    cfg = compose(["model=tiny_llama", "load.dummy=xavier", "runtime=cpu", "kv_cache.num_blocks=64",
                   "runtime.enable_log_stats=false"])
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    bad = SamplingParams(temperature=0.5, max_tokens=8)
    bad.temperature = float("nan")
    client = EngineClient(cfg, core_main=run_core).start()
    try:
        clean = asyncio.run(_generate(client, [greedy] * 6))
    finally:
        client.close()
    client = EngineClient(cfg, core_main=run_core).start()
    try:
        mixed = asyncio.run(_generate(client, [greedy, bad, greedy, greedy, bad, greedy]))
        assert client.alive
        for i in (1, 4):
            assert isinstance(mixed[i], RequestFailed) and mixed[i].rejected
            assert "temperature" in str(mixed[i])
            assert engine_error(mixed[i]).status == 400
        assert [mixed[i] for i in (0, 2, 3, 5)] == [clean[i] for i in (0, 2, 3, 5)]
        deadline = time.monotonic() + 10
        while client.stats.num_running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.stats.num_running == 0
        assert client.stats.kv_blocks_free == client.stats.kv_blocks_total
    finally:
        client.close()
