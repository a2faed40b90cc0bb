"""Delivery under load, in process: one loop wake-up per engine step, one unread chunk per stream
(backlog merged, nothing held back), and the silence watchdog's clock."""
from __future__ import annotations

import asyncio
import json
import logging
import threading

import pytest

from atom.model_engine.messages import TokenLogprob
from atom.model_engine.output_processor import RequestOutput
from atom.serving.common.sse import DONE_FRAME, data_frame, event_frame
from atom.serving.common.streaming_dispatch import (SilenceWatchdog, StreamBatchDispatcher,
                                                    StreamOutputCollector, client_stream)
from atom.serving.openai.protocol import ChatChunkChoice, ChatCompletionChunk, DeltaMessage


def out(rid: str, text: str, tokens: list[int], finished: bool = False, n_out: int = 0) -> RequestOutput:
    return RequestOutput(rid, text, tokens, finished, "length" if finished else None, 3, n_out, 0.0,
                         0.1, 0.2 if finished else None, logprobs=[TokenLogprob(t, -1.0, []) for t in tokens])


def test_collector_merges_backlog_into_one_chunk():
    async def run():
        c = StreamOutputCollector(asyncio.get_running_loop())
        for i in range(5):
            c.put(0, out("a", "x" * (i + 1), [i], finished=i == 4, n_out=i + 1))
        items = await c.get()
        assert len(items) == 1
        _, merged = items[0]
        assert merged.text == "x" + "xx" + "xxx" + "xxxx" + "xxxxx"
        assert merged.token_ids == [0, 1, 2, 3, 4] and len(merged.logprobs) == 5
        assert merged.finished and merged.num_output_tokens == 5
    asyncio.run(run())


def test_collector_releases_without_waiting_for_more():
    async def run():
        c = StreamOutputCollector(asyncio.get_running_loop())
        got = []

        async def consumer():
            for _ in range(3):
                got.append([o.text for _, o in await c.get()])

        task = asyncio.create_task(consumer())
        for t in "abc":
            await asyncio.sleep(0)
            c.put(0, out("a", t, [1]))
            await asyncio.sleep(0.01)
        await asyncio.wait_for(task, 2)
        assert got == [["a"], ["b"], ["c"]]  # a consumer that keeps up sees one chunk per step
    asyncio.run(run())


def test_collector_keeps_choices_apart_and_fails_loudly():
    async def run():
        c = StreamOutputCollector(asyncio.get_running_loop())
        c.put(1, out("b", "y", [2]))
        c.put(0, out("a", "x", [1]))
        assert [i for i, _ in await c.get()] == [0, 1]
        c.fail(RuntimeError("core died"))
        with pytest.raises(RuntimeError, match="core died"):
            await asyncio.wait_for(c.get(), 1)
    asyncio.run(run())


def test_dispatcher_one_loop_wakeup_per_step():
    """Three engine steps of 100 streams posted from another thread cost three callbacks on the
    loop, not 300."""
    async def run():
        loop = asyncio.get_running_loop()
        d = StreamBatchDispatcher(loop)
        collectors = [StreamOutputCollector(loop) for _ in range(100)]
        for i, c in enumerate(collectors):
            d.register(f"r{i}", c)
        scheduled = []
        original = loop.call_soon_threadsafe

        def counting(cb, *args):
            scheduled.append(cb)
            return original(cb, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]

        def engine():
            for step in range(3):
                d.post([out(f"r{i}", str(step), [step], finished=step == 2) for i in range(100)], None)

        t = threading.Thread(target=engine)
        t.start()
        t.join()
        await asyncio.sleep(0.05)
        assert len(scheduled) == 3 and d.steps_dispatched == 3
        texts = [(await c.get())[0][1].text for c in collectors]
        assert texts == ["012"] * 100  # the consumer never read, so all three steps merged
        assert len(d) == 0  # finished streams unregister themselves
    asyncio.run(run())


def test_dispatcher_ignores_unregistered_and_fails_all():
    async def run():
        loop = asyncio.get_running_loop()
        d = StreamBatchDispatcher(loop)
        c = StreamOutputCollector(loop)
        d.register("a", c)
        d.unregister("a")
        d.dispatch([out("a", "x", [1])])
        d.register("b", c)
        d.fail_all(RuntimeError("gone"))
        with pytest.raises(RuntimeError):
            await c.get()
    asyncio.run(run())


def test_watchdog_excludes_first_frame_and_logs_long_gaps(caplog):
    w = SilenceWatchdog(log_threshold_s=30.0)
    assert w.longest_silence(100.0) == 0.0
    w.frame("r1", 100.0)  # the first frame: no gap measured before it
    assert w.longest_recovered == 0.0
    assert w.longest_silence(104.5) == pytest.approx(4.5)
    with caplog.at_level(logging.WARNING, logger="atom.server"):
        w.frame("r1", 140.0)
    assert "r1" in caplog.text and "40.0" in caplog.text
    w.close("r1")
    assert w.longest_silence(1000.0) == 0.0


def test_client_stream_times_every_frame_and_closes():
    async def run():
        w = SilenceWatchdog()

        async def frames():
            yield b"a"
            await asyncio.sleep(0.05)
            yield b"b"

        got = [f async for f in client_stream(frames(), "r", w)]
        assert got == [b"a", b"b"] and w.longest_recovered >= 0.04
        assert w.longest_silence() == 0.0  # closed streams leave the gauge
    asyncio.run(run())


def test_sse_frames_match_json():
    chunk = ChatCompletionChunk("id", 1, "m", [ChatChunkChoice(0, DeltaMessage(content="hé\n"))])
    frame = data_frame(chunk)
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    body = json.loads(frame[6:])
    assert body["choices"][0]["delta"] == {"content": "hé\n"} and body["object"] == "chat.completion.chunk"
    assert body["choices"][0]["finish_reason"] is None
    assert event_frame("message_start", {"a": 1}) == b'event: message_start\ndata: {"a":1}\n\n'
    assert DONE_FRAME == b"data: [DONE]\n\n"
