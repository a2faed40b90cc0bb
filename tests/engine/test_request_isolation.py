"""One request that makes a step raise fails alone: the engine and every other sequence go on.

The poison is a sampling parameter past what validation allows, set after validation (the way a
validation gap reaches the core): a seed outside torch.Generator's range raises inside the step,
while the batch is being prepared. The other requests must get exactly the tokens they get in a
run without it, with async scheduling on and off, and no KV block may stay held.
"""
from __future__ import annotations

import pytest
import torch

from atom import SamplingParams
from atom.model_engine.engine_core import RequestRejected
from tests.engine.checkpoints import make_checkpoint, local_engine


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("isolation"))


def _engine(path, overlap: bool):
    return local_engine(path, "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16",
                        f"scheduler.async_scheduling={str(overlap).lower()}")


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(3, 256, (k,), generator=g).tolist() for k in (5, 40, 17, 90, 9, 33)]


def _poisoned() -> SamplingParams:
    sp = SamplingParams(temperature=0.8, max_tokens=6, seed=1)
    sp.seed = 2**70  # torch.Generator.manual_seed raises on it, inside the step
    return sp


def _assert_drained(engine) -> None:
    s = engine.stats()
    assert engine.is_finished()
    assert s.kv_blocks_free == s.kv_blocks_total, "a failed request's blocks leaked"
    assert s.num_running == 0 and s.num_waiting == 0


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])
def test_a_request_whose_step_raises_fails_alone(ckpt, overlap):
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    prompts = _prompts()
    engine = _engine(ckpt, overlap)
    clean = engine.generate(prompts, greedy)
    _assert_drained(engine)

    poisoned_at = {1, 4}  # two bad requests in one batch: each is pinned on its own
    params = [_poisoned() if i in poisoned_at else greedy for i in range(len(prompts))]
    outs = engine.generate(prompts, params)
    for i, out in enumerate(outs):
        if i in poisoned_at:
            assert out["finish_reason"] == "error" and out["token_ids"] == []
            assert "RuntimeError" in out["error"] or "Overflow" in out["error"], out["error"]
        else:
            assert out["error"] is None
            assert out["token_ids"] == clean[i]["token_ids"], f"request {i} was disturbed"
    _assert_drained(engine)

    again = engine.generate(prompts, greedy)  # the engine is whole afterwards
    assert [o["token_ids"] for o in again] == [o["token_ids"] for o in clean]
    _assert_drained(engine)


def test_a_request_that_fails_mid_generation_keeps_what_the_others_had(ckpt):
    """The poisoned request joins while others are decoding (async scheduling: a step in flight)."""
    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    prompts = _prompts()
    engine = _engine(ckpt, True)
    clean = engine.generate(prompts[:3], greedy)
    ids = engine.add_request(prompts[:3], greedy)
    results = {}
    for _ in range(3):
        for done in engine.step():
            results[done["request_id"]] = done
    bad = engine.add_request(prompts[3], _poisoned())[0]
    while not engine.is_finished():
        for done in engine.step():
            results[done["request_id"]] = done
    assert results[bad]["finish_reason"] == "error"
    assert [results[i]["token_ids"] for i in ids] == [o["token_ids"] for o in clean]
    _assert_drained(engine)


def test_token_ids_outside_the_vocabulary_are_refused_before_they_run(ckpt):
    """An id past the embedding would be a device-side assert on a GPU (fatal to every request),
    so the core refuses it at admission."""
    engine = _engine(ckpt, False)
    vocab = engine.core.executor.runner.vocab_size
    for bad in ([1, vocab, 2], [-1], [2**40]):
        with pytest.raises(RequestRejected, match="vocabulary"):
            engine.add_request(bad, SamplingParams(max_tokens=2))
    _assert_drained(engine)
    assert engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=2))[0]["token_ids"]


@pytest.mark.parametrize("field,value", [("temperature", float("nan")), ("top_p", float("nan")),
                                         ("presence_penalty", float("inf")),
                                         ("repetition_penalty", float("nan")),
                                         ("seed", 2**64), ("seed", -(2**63) - 1)])
def test_sampling_params_refuse_values_the_sampler_cannot_run(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_a_prompt_larger_than_the_whole_cache_is_refused_not_fatal(ckpt):
    """Scheduling it would raise inside the core's step (no block count ever fits it)."""
    engine = local_engine(ckpt, "kv_cache.block_size=16", "kv_cache.num_blocks=3")
    with pytest.raises(RequestRejected, match="needs 4 KV blocks; the cache has 3"):
        engine.add_request(list(range(3, 53)), SamplingParams(max_tokens=2))
    assert engine.generate([[4, 5, 6]], SamplingParams(temperature=0, max_tokens=3))[0]["token_ids"]
    _assert_drained(engine)


def _too_many_logprobs() -> SamplingParams:
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    sp.logprobs = 10**6  # torch.topk past the vocabulary raises, inside the rank's step
    return sp


@pytest.mark.parametrize("poison", [_poisoned, _too_many_logprobs], ids=["seed", "logprobs"])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])
def test_on_two_ranks_a_request_whose_step_raises_fails_alone(ckpt, overlap, poison):
    """Tensor parallelism on two gloo ranks: a step that raises in every rank's launch (the
    logprob count) or while the core encodes it for them (a seed msgpack cannot carry) fails its
    request alone; the ranks stay in step and give the others one process's tokens."""
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    prompts = _prompts()
    clean = _engine(ckpt, overlap).generate(prompts, greedy)
    engine = local_engine(ckpt, "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16",
                          f"scheduler.async_scheduling={str(overlap).lower()}",
                          "parallel.tensor_parallel_size=2")
    try:
        params = [poison() if i == 2 else greedy for i in range(len(prompts))]
        outs = engine.generate(prompts, params)
        assert outs[2]["finish_reason"] == "error" and outs[2]["token_ids"] == []
        for i, out in enumerate(outs):
            if i != 2:
                assert out["error"] is None and out["token_ids"] == clean[i]["token_ids"], i
        _assert_drained(engine)
        again = engine.generate(prompts, greedy)
        assert [o["token_ids"] for o in again] == [o["token_ids"] for o in clean]
    finally:
        engine.shutdown()
