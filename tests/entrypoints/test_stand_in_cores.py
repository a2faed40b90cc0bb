"""The synthetic and scripted engine cores the server is measured and tested with, and the core
loop's status line."""
from __future__ import annotations

import logging

import pytest

from atom.config.compose import compose
from atom.model_engine.core_loop import _StatusLine
from atom.model_engine.messages import EngineRequest, EngineStats
from atom.model_engine.output_processor import OutputProcessor
from atom.model_engine.scripted_core import ScriptedEngineCore
from atom.model_engine.synthetic_core import SyntheticEngineCore
from atom.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def cfg():
    return compose(["model=tiny_llama", "load=dummy", "server.engine_source=synthetic",
                    "server.synthetic_tokens_per_s=0", "kv_cache.num_blocks=64", "scheduler.max_num_seqs=2",
                    "server.synthetic_token_ids=[72,105,33]"])


def req(rid: str, n_prompt: int = 20, **kw) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt_token_ids=[65] * n_prompt, sampling_params=SamplingParams(**kw))


def run_all(core) -> dict[str, list]:
    outs: dict[str, list] = {}
    for _ in range(1000):
        if not core.has_unfinished():
            break
        for o in core.step():
            outs.setdefault(o.request_id, []).append(o)
    return outs


def test_synthetic_limits_blocks_and_abort(cfg):
    core = SyntheticEngineCore(cfg)
    total = core.stats().kv_blocks_total
    core.add_request(req("a", max_tokens=5))
    core.add_request(req("b", max_tokens=3, stop_token_ids=[33]))
    core.add_request(req("c", max_tokens=4))  # waits: max_num_seqs=2
    core.step()
    s = core.stats()
    assert (s.num_running, s.num_waiting) == (2, 1) and s.kv_blocks_free < total
    core.abort_requests(["a"])
    outs = run_all(core)
    assert [t for o in outs["b"] for t in o.new_token_ids] == [105, 33]  # 72 came in the first step
    assert outs["b"][-1].finish_reason == "stop" and outs["c"][-1].finish_reason == "length"
    assert sum(len(o.new_token_ids) for o in outs["c"]) == 4 and "a" not in outs
    assert core.stats().kv_blocks_free == total and core.stats().num_running == 0


def test_synthetic_paces_steps(cfg):
    import time

    paced = SyntheticEngineCore(cfg, tokens_per_s=100.0)
    paced.add_request(req("a", max_tokens=6))
    t = time.monotonic()
    run_all(paced)
    assert time.monotonic() - t >= 0.045  # 6 steps at 10 ms, the first one immediate


def test_scripted_replays_text_exactly(cfg):
    from atom.builder import build_tokenizer

    text = "Sure! <tool_call>{\"name\": \"f\"}</tool_call> done."
    scripted_cfg = compose(["model=tiny_llama", "load=dummy", "server.engine_source=scripted",
                            f"server.script_text='{text}'", "server.script_tokens_per_s=0"])
    tok = build_tokenizer(scripted_cfg)
    core = ScriptedEngineCore(scripted_cfg, tok)
    proc = OutputProcessor(tok)
    proc.add_request("s", [65], SamplingParams(max_tokens=500))
    core.add_request(req("s", 1, max_tokens=500))
    pieces, steps = [], 0
    while core.has_unfinished():
        outs, _ = proc.process(core.step())
        steps += 1
        pieces += [o.text for o in outs]
    assert "".join(pieces) == text and steps == len(tok.encode(text, add_special_tokens=False))


def test_status_line(caplog):
    line = _StatusLine(interval_s=0.0, enabled=True)
    s = EngineStats(num_running=3, num_waiting=1, kv_blocks_total=10, kv_blocks_free=5,
                    prefix_cache_queries=4, prefix_cache_hits=1, prompt_tokens_total=100,
                    generation_tokens_total=50)
    with caplog.at_level(logging.INFO, logger="atom.core"):
        line.maybe_log(s)
    msg = caplog.text
    assert "running 3 reqs" in msg and "waiting 1 reqs" in msg and "KV cache usage 50.0%" in msg
    assert "prefix cache hit rate 25.0%" in msg and "generation throughput" in msg
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="atom.core"):
        _StatusLine(interval_s=0.0, enabled=False).maybe_log(s)
    assert caplog.text == ""
