"""A request that fails while it is being submitted leaves nothing behind in the API process.

The HTTP layer refuses out-of-range parameters before this point, so the failure is provoked
below it: a second choice whose parameters msgpack cannot encode (an int past 2**64, what
`top_k: 1e23` used to become). Its sibling already reached the core; both must be released —
the dispatcher's routes, the output processor's per-request state (the ~60 KB a request that
failed in the ZMQ encode used to leak) and the sibling's sequence in the core.
"""
from __future__ import annotations

import asyncio
import time

import pytest

from atom.builder import build_tokenizer
from atom.config.compose import compose
from atom.core_process import run_core
from atom.model_engine.engine_client import EngineClient
from atom.sampling_params import SamplingParams
from atom.serving.common.context import ServerContext
from atom.serving.common.generation import Generation
from atom.serving.common.metrics import AtomMetricsExporter
from atom.serving.common.streaming_dispatch import SilenceWatchdog, StreamBatchDispatcher

from srv_process import HELLO_IDS


async def _fail_then_serve(client: EngineClient, ctx: ServerContext) -> str:
    ctx.dispatcher = StreamBatchDispatcher(asyncio.get_running_loop())
    client.attach(ctx.dispatcher)
    ok = SamplingParams(max_tokens=1000, ignore_eos=True)
    bad = SamplingParams(max_tokens=4, top_k=10**30)
    gen = Generation(ctx, "bad", [([65, 66], ok), ([65, 66], bad)])
    with pytest.raises(OverflowError):
        gen.start()
    assert len(ctx.dispatcher) == 0, "a collector route outlived its failed request"
    assert client.processor.states == {}, "per-request output state outlived its failed request"
    deadline = time.monotonic() + 10
    while (client.stats.num_running or client.stats.num_waiting) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert client.stats.num_running == 0 and client.stats.kv_blocks_free == client.stats.kv_blocks_total

    good = Generation(ctx, "good", [([65], SamplingParams(max_tokens=6, ignore_eos=True))])
    good.start()
    try:
        await asyncio.wait_for(good.run_to_end(), 10)
    finally:
        good.close()
    return "".join(good.states[0].text)


def test_a_request_failing_mid_submit_frees_everything():
    cfg = compose(["model=tiny_llama", "load=dummy", "server.engine_source=synthetic",
                   "server.synthetic_tokens_per_s=200", f"server.synthetic_token_ids={HELLO_IDS}",
                   "kv_cache.num_blocks=4096", "runtime.enable_log_stats=false"])
    client = EngineClient(cfg, build_tokenizer(cfg), core_main=run_core).start()
    watchdog = SilenceWatchdog()
    ctx = ServerContext(cfg, client, client.tokenizer, watchdog,
                        AtomMetricsExporter(lambda: client.stats, watchdog.longest_silence, "t"),
                        model_name="t")
    try:
        assert asyncio.run(_fail_then_serve(client, ctx)) == "Hello "
    finally:
        client.close()
