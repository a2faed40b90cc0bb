"""The API process's EngineClient against a real core process (the synthetic core).

Stop strings are found on the API side, so the core only hears of them through the abort the
reader thread sends. Those aborts must arrive (the core frees the blocks and stops stepping the
request), and more of them than a ZMQ high-water mark (1000) must not wedge the reader; nor may a
burst of requests block the event loop while the core is busy.
"""
from __future__ import annotations

import asyncio
import threading
import time

from atom.builder import build_tokenizer
from atom.config.compose import compose
from atom.core_process import run_core
from atom.model_engine.engine_client import EngineClient
from atom.sampling_params import SamplingParams

from srv_process import HELLO_IDS

N_REQUESTS = 1200  # above the default ZMQ high-water mark of one socket
MAX_TOKENS = 2000  # what a request whose abort was lost runs to in the core (tiny_llama: 2048 positions)


class Collector:
    """The dispatcher's side of the contract: called from the reader thread."""

    def __init__(self) -> None:
        self.finished: dict[str, tuple[str, str]] = {}
        self.text: dict[str, str] = {}
        self.failure: BaseException | None = None
        self._lock = threading.Lock()

    def post(self, outputs, stats) -> None:
        with self._lock:
            for o in outputs:
                self.text[o.request_id] = self.text.get(o.request_id, "") + o.text
                if o.finished:
                    self.finished[o.request_id] = (o.finish_reason, self.text[o.request_id])

    def post_failure(self, error: BaseException) -> None:
        self.failure = error


async def _run_stop_string_requests(client: EngineClient, collector: Collector) -> None:
    """One request at a time, so each stop hit is its own abort message (batched hits would share
    one and never reach the high-water mark)."""
    client.attach(collector)
    params = SamplingParams(max_tokens=MAX_TOKENS, stop_strings=["lo"], ignore_eos=True)
    deadline = time.monotonic() + 60
    for i in range(N_REQUESTS):
        client.add_request(f"r{i}", [65, 66], params, time.monotonic())
        while f"r{i}" not in collector.finished and collector.failure is None:
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.001)
    # The core heard every abort: nothing left running, every block back in the pool.
    while client.stats.num_running and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def test_stop_string_aborts_reach_the_core_and_never_wedge_the_reader():
    cfg = compose(["model=tiny_llama", "load=dummy", "server.engine_source=synthetic",
                   "server.synthetic_tokens_per_s=20000", f"server.synthetic_token_ids={HELLO_IDS}",
                   "kv_cache.num_blocks=4096", "runtime.enable_log_stats=false"])
    client = EngineClient(cfg, build_tokenizer(cfg), core_main=run_core).start()
    collector = Collector()
    try:
        asyncio.run(_run_stop_string_requests(client, collector))
        assert collector.failure is None, collector.failure
        assert len(collector.finished) == N_REQUESTS, f"only {len(collector.finished)} finished"
        assert set(collector.finished.values()) == {("stop", "Hel")}
        assert client.stats.num_running == 0 and client.stats.num_waiting == 0
        assert client.stats.kv_blocks_free == client.stats.kv_blocks_total
        # The core keeps stepping while an abort makes its round trip (a few tokens a request);
        # had the aborts been lost, each request would have run to MAX_TOKENS.
        assert client.stats.generation_tokens_total < N_REQUESTS * MAX_TOKENS // 2
    finally:
        client.close()


async def _burst(client: EngineClient, collector: Collector, n: int) -> float:
    client.attach(collector)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    client.add_request("long", [65], SamplingParams(max_tokens=100, ignore_eos=True), time.monotonic())
    while "long" not in collector.text:  # the core is stepping: it now sleeps between steps
        await asyncio.sleep(0.01)
    t0 = time.monotonic()
    for i in range(n):
        client.add_request(f"b{i}", [65], params, time.monotonic())
    return time.monotonic() - t0


def test_a_burst_of_requests_never_blocks_the_event_loop():
    """5,000 requests sent while the core sleeps inside a 4-second step: every send returns at
    once (a send queue bounded at ZMQ's default 1,000 would stall the loop until the core
    drained it, > 4 s). The bound is half the step, not a speed: the sends take ~0.15 s alone,
    and 1.4 s once on the 2-core machine beside another CPU-bound process."""
    cfg = compose(["model=tiny_llama", "load=dummy", "server.engine_source=synthetic",
                   "server.synthetic_tokens_per_s=0.25", f"server.synthetic_token_ids={HELLO_IDS}",
                   "kv_cache.num_blocks=4096", "runtime.enable_log_stats=false"])
    client = EngineClient(cfg, build_tokenizer(cfg), core_main=run_core).start()
    try:
        assert asyncio.run(_burst(client, Collector(), 5000)) < 2.0
    finally:
        client.close()


def test_data_parallel_requests_go_to_the_least_loaded_replica():
    """Two real (synthetic) core processes behind one DataParallelEngineClient: requests in
    flight split evenly, an abort reaches the replica that holds the request, stats add up."""
    from atom.model_engine.dp_engine_client import DataParallelEngineClient

    cfg = compose(["model=tiny_llama", "load=dummy", "server.engine_source=synthetic",
                   "server.synthetic_tokens_per_s=5", f"server.synthetic_token_ids={HELLO_IDS}",
                   "kv_cache.num_blocks=64", "runtime.enable_log_stats=false"])
    dp = DataParallelEngineClient(cfg, 2, run_core)
    dp.launch()
    try:
        dp.set_tokenizer(build_tokenizer(cfg))
        dp.wait_ready()

        async def run() -> None:
            dp.attach(Collector())
            for i in range(6):
                dp.add_request(f"r{i}", [65, 66], SamplingParams(max_tokens=500), time.monotonic())
            assert [len(c.processor.states) for c in dp.clients] == [3, 3]
            dp.abort(["r0", "r1"])
            assert sorted(len(c.processor.states) for c in dp.clients) == [2, 2]
            deadline = time.monotonic() + 10
            while dp.stats.num_running != 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert dp.stats.num_running == 4
            assert dp.stats.kv_blocks_total == 2 * 64

        asyncio.run(run())
        assert dp.alive
    finally:
        dp.close()
