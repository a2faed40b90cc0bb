"""Prefix caching changes nothing but speed; a seed makes sampling reproducible in any batch."""
from __future__ import annotations

import pytest
import torch

import atom
from atom import SamplingParams
from tests.engine.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("qwen3", tmp_path_factory.mktemp("pc"))


def _engine(path, *extra):
    return atom.build_engine(atom.compose(["model=local", f"model.path={path}", "runtime=cpu",
                                           "load.progress_bar=false", *extra]))


def _prompts():
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(3, 256, (40,), generator=g).tolist()
    return [shared + torch.randint(3, 256, (n,), generator=g).tolist() for n in (1, 7, 20, 33)]


def test_prefix_caching_on_and_off_give_identical_greedy_outputs(ckpt):
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    off = _engine(ckpt).generate(_prompts(), params)
    on_engine = _engine(ckpt, "kv_cache.enable_prefix_caching=true")
    on = on_engine.generate(_prompts(), params)
    assert [o["token_ids"] for o in on] == [o["token_ids"] for o in off]


def test_second_identical_prompt_hits_the_cache(ckpt):
    engine = _engine(ckpt, "kv_cache.enable_prefix_caching=true")
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    prompt = _prompts()[3]  # 73 tokens: 4 full blocks of 16
    first = engine.generate([prompt], params)[0]
    hits_before = engine.stats().prefix_cache_hits
    second = engine.generate([prompt], params)[0]
    assert first["num_cached_tokens"] == 0
    assert second["num_cached_tokens"] == 64
    assert engine.stats().prefix_cache_hits - hits_before == 4
    assert second["token_ids"] == first["token_ids"]


def test_blocks_return_to_the_pool(ckpt):
    engine = _engine(ckpt, "kv_cache.enable_prefix_caching=true", "kv_cache.num_blocks=64")
    start = engine.stats().kv_blocks_free
    engine.generate(_prompts(), SamplingParams(temperature=0.7, max_tokens=5, seed=1))
    assert engine.stats().kv_blocks_free == start


def test_same_seed_same_text_alone_and_in_a_batch(ckpt):
    engine = _engine(ckpt)
    seeded = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=16, seed=1234,
                            ignore_eos=True)
    other = SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True)
    prompt = _prompts()[1]
    alone = engine.generate([prompt], seeded)[0]["token_ids"]
    rerun = engine.generate([prompt], seeded)[0]["token_ids"]
    batched = engine.generate(_prompts() + [prompt], [other] * 4 + [seeded])[-1]["token_ids"]
    assert alone == rerun == batched
    different = engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=16, seed=99,
                                                         ignore_eos=True))[0]["token_ids"]
    assert different != alone


def test_abort_frees_blocks_in_the_same_step(ckpt):
    engine = _engine(ckpt, "kv_cache.num_blocks=64")
    start = engine.stats().kv_blocks_free
    [rid] = engine.add_request([_prompts()[2]], SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    assert engine.stats().kv_blocks_free < start
    engine.abort(rid)
    assert engine.stats().kv_blocks_free == start
