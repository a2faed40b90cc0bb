"""Async scheduling (step N+1 built while step N runs) changes nothing a client can see.

On CPU the overlap gains nothing, but the bookkeeping is the same code as on the GPU: pending
tokens read from the previous step's device output, a stopped sequence's extra step dropped,
blocks freed one step late. Each test runs the same requests with it on and off and compares.
"""
from __future__ import annotations

import pytest
import torch

from atom import SamplingParams
from tests.engine.checkpoints import make_checkpoint, local_engine


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("async"))


def _engine(path, overlap: bool, *extra: str):
    return local_engine(path, "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16",
                        f"scheduler.async_scheduling={str(overlap).lower()}", *extra)


def _prompts(n: int = 8) -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    lengths = [3, 17, 40, 5, 90, 33, 64, 9][:n]
    return [torch.randint(3, 256, (k,), generator=g).tolist() for k in lengths]


def _both(path, params, *extra, prompts=None, preempts: bool = False):
    prompts = prompts or _prompts()
    runs = []
    for overlap in (False, True):
        engine = _engine(path, overlap, *extra)
        outs = engine.generate(prompts, params)
        s = engine.stats()
        assert s.kv_blocks_free == s.kv_blocks_total, "blocks leaked"
        assert not preempts or s.num_preempted_total > 0, "the cache was meant to run out"
        assert engine.is_finished()
        runs.append(outs)
    return runs


def _view(outs):
    return [(o["token_ids"], o["finish_reason"]) for o in outs]


def test_greedy_with_preemption_and_prefix_caching_is_identical(ckpt):
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True)
              for m in (1, 12, 5, 12, 9, 2, 12, 7)]
    sync, overlap = _both(ckpt, params, "kv_cache.num_blocks=14", "scheduler.reserve_ratio=0",
                          "kv_cache.enable_prefix_caching=true", preempts=True)
    assert _view(overlap) == _view(sync)
    assert [len(o["token_ids"]) for o in overlap] == [1, 12, 5, 12, 9, 2, 12, 7]


def test_a_stop_token_ends_the_output_exactly_there(ckpt):
    probe = _engine(ckpt, False).generate(_prompts(), SamplingParams(temperature=0, max_tokens=12,
                                                                     ignore_eos=True))
    stop = probe[1]["token_ids"][4]  # a token the greedy run produces mid-way
    params = SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop], ignore_eos=True)
    sync, overlap = _both(ckpt, params)
    assert _view(overlap) == _view(sync)
    assert overlap[1]["finish_reason"] == "stop"
    assert overlap[1]["token_ids"][-1] == stop and len(overlap[1]["token_ids"]) <= 5


def test_seeded_sampling_and_logprobs_are_identical(ckpt):
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=20, seed=7, max_tokens=8,
                            ignore_eos=True, logprobs=3)
    engines = [_engine(ckpt, o) for o in (False, True)]
    rids = [e.add_request(_prompts(4), params) for e in engines]
    got = []
    for e in engines:
        records = {}
        while not e.is_finished():
            for out in e.core.step():
                records.setdefault(out.request_id, []).extend(out.logprobs or [])
        got.append(records)
    assert got[0].keys() == got[1].keys() and len(rids[0]) == 4
    for rid in got[0]:
        a, b = got[0][rid], got[1][rid]
        assert [r.token_id for r in a] == [r.token_id for r in b]
        assert [len(r.top) for r in b] == [3] * 8
        for x, y in zip(a, b):
            assert x.logprob == pytest.approx(y.logprob, abs=1e-5)


def test_penalties_fall_back_to_resolving_every_step(ckpt):
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True,
                            repetition_penalty=1.3, frequency_penalty=0.5)
    sync, overlap = _both(ckpt, params, prompts=_prompts(4))
    assert _view(overlap) == _view(sync)


def test_abort_while_a_step_is_in_flight_frees_everything(ckpt):
    engine = _engine(ckpt, True, "kv_cache.enable_prefix_caching=true")
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    ids = engine.add_request(_prompts(4), params)
    for _ in range(3):
        engine.step()
    assert engine.core._inflight is not None
    for rid in ids[:2]:
        engine.abort(rid)
    done = []
    while not engine.is_finished():
        done += engine.step()
    assert sorted(d["request_id"] for d in done) == sorted(ids[2:])
    assert all(len(d["token_ids"]) == 30 for d in done)
    s = engine.stats()
    assert s.kv_blocks_free == s.kv_blocks_total
