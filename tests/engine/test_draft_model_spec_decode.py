"""Speculative decoding with a draft model (specdecode=draft_model), end to end on tiny llama
checkpoints: greedy output is the plain output token for token whatever the draft proposes (a
random draft of another width: acceptance about 0), the target as its own draft is accepted
every time, stops inside an accepted run end where the plain output ends, chunked prefill,
preemption and prefix caching keep the output, and at temperature > 0 the rejection sampler
keeps the target's distribution. The draft checkpoint is checked before anything loads."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from atom import SamplingParams
from atom.config.compose import compose
from atom.config.errors import ConfigError
from atom.model_engine.messages import EngineRequest
from atom.spec_decode.stats import mtp_stats_json
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.spec_steps import (assert_seeded_request_is_the_same_alone_and_in_a_batch,
                                     assert_stops_where_plain_stops, chain_pvalue, flat,
                                     on_cuda_f32, run, transition)
from tests.engine.spec_steps import spec_engine as _engine, spec_prompts as _prompts

MAX_TOKENS = 24
# The tiny checkpoints' logits spread little (std ~0.16): a low temperature makes p and q peaked
# enough that a wrong acceptance rule shows in the output distribution.
TEMP = 0.1
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)


def _draft(path, k: int) -> tuple[str, ...]:
    return ("specdecode=draft_model", f"specdecode.draft_model={path}",
            f"specdecode.num_speculative_tokens={k}")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("target"))


@pytest.fixture(scope="module")
def random_draft(tmp_path_factory):
    """Half the target's width, one layer, its own KV heads and weights."""
    return make_checkpoint("llama", tmp_path_factory.mktemp("draft"), seed=5, hidden_size=32,
                           intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           num_key_value_heads=1)


@pytest.fixture(scope="module")
def plain_output(target):
    return [flat(c) for c in run(_engine(target), _prompts(), GREEDY)[0]]


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_output_with_a_random_draft_model_is_the_plain_output(target, random_draft,
                                                                     plain_output, k):
    engine = _engine(target, *_draft(random_draft, k))
    got, _ = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == plain_output
    s = engine.core.stats()
    assert s.spec_draft_tokens > 0
    assert s.spec_accepted_tokens <= 0.1 * s.spec_draft_tokens


@pytest.mark.parametrize("k", [1, 3])
def test_the_target_as_its_own_draft_is_always_accepted_and_exact(target, plain_output, k):
    plain_steps = run(_engine(target), _prompts(), GREEDY)[1]
    engine = _engine(target, *_draft(target, k))
    got, steps = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == plain_output
    s = engine.core.stats()
    assert s.spec_draft_tokens > 0 and s.spec_accepted_tokens == s.spec_draft_tokens
    assert steps < plain_steps
    stats = mtp_stats_json(s, "draft_model")
    assert stats["method"] == "draft_model" and stats["num_speculative_tokens"] == k
    assert stats["total_draft_tokens"] == s.spec_draft_tokens
    assert stats["acceptance_rate"] == 1.0 and stats["per_position_acceptance"] == [1.0] * k
    assert stats["average_tokens_per_forward"] > 1.0


@pytest.mark.parametrize("how", ["max_tokens", "stop_token", "eos"])
def test_a_stop_inside_an_accepted_run_ends_where_the_plain_output_ends(target, how):
    plain, spec = _engine(target), _engine(target, *_draft(target, 3))
    assert_stops_where_plain_stops(plain, spec, _prompts()[2:3], how, MAX_TOKENS)


@pytest.mark.parametrize("extra", [("kv_cache.num_blocks=16", "scheduler.reserve_ratio=0",
                                    "scheduler.max_num_batched_tokens=8"),
                                   ("kv_cache.enable_prefix_caching=true",)],
                         ids=["chunked_and_preempting", "prefix_cache"])
@pytest.mark.parametrize("draft", ["random", "self"])
def test_chunked_prefill_preemption_and_prefix_caching_keep_greedy_output(
        target, random_draft, plain_output, extra, draft):
    """The mixed-length batch (1 to 33 tokens) in 8-token chunks over 64 tokens of cache: the
    draft's pool shares the target's blocks, freed and recomputed with them."""
    path = target if draft == "self" else random_draft
    engine = _engine(target, *_draft(path, 3), "scheduler.async_scheduling=true", *extra)
    got, _ = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == plain_output
    s = engine.core.stats()
    if draft == "self":
        assert s.spec_accepted_tokens == s.spec_draft_tokens > 0
    if "kv_cache.num_blocks=16" in extra:
        assert s.num_preempted_total > 0
    else:
        again, _ = run(engine, _prompts(), GREEDY)
        assert [flat(c) for c in again] == plain_output
        assert engine.core.stats().prefix_cache_hits > 0


def _context_free(root, head_noise: float = 0.0):
    """A llama whose logits at a position are a function of that position's token (every
    o_proj and down_proj zero: the residual stream is the embedding), so its sampled chain has
    a closed form; head_noise > 0 perturbs its LM head by that fraction of its spread (a draft
    whose q is near p, not p)."""
    from safetensors.torch import load_file, save_file

    path = make_checkpoint("llama", root, name=f"context_free_{head_noise}")
    tensors = load_file(str(path / "model.safetensors"))
    for name, t in tensors.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            t.zero_()
    head = tensors["lm_head.weight"]
    noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(2))
    tensors["lm_head.weight"] = head + head_noise * head.std() * noise
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def test_sampled_output_through_the_rejection_sampler_has_the_targets_distribution(
        tmp_path_factory):
    """Top-k 3, k = 2 drafts sampled from a draft whose head is a perturbed copy of the
    target's: over 3,000 one-token prompts the outputs (t1..t4) follow the target's chain
    p(t1|x) p(t2|t1) p(t3|t2) p(t4|t3) (chi-square, 0.1% level), with both acceptances and
    rejections seen."""
    root = tmp_path_factory.mktemp("sampled")
    path, draft = _context_free(root), _context_free(root, head_noise=0.5)
    n, x = 3000, 17
    params = SamplingParams(temperature=TEMP, top_k=3, max_tokens=4, ignore_eos=True)
    engine = local_engine(path, *_draft(draft, 2), "scheduler.max_num_seqs=256")
    outs = [o["token_ids"] for o in engine.generate([[x]] * n, params)]
    s = engine.core.stats()
    assert 0.2 * s.spec_draft_tokens < s.spec_accepted_tokens < 0.95 * s.spec_draft_tokens
    assert chain_pvalue(outs, transition(path, 3, TEMP), x) > 1e-3


def test_a_seeded_sampled_request_is_the_same_alone_and_in_a_batch(tmp_path_factory):
    """Its generator decides every number its target samples, its drafts and its rejection
    draws use, so the rows beside it change nothing."""
    root = tmp_path_factory.mktemp("seeded")
    path, draft = _context_free(root), _context_free(root, head_noise=0.5)
    engine = _engine(path, *_draft(draft, 2))
    assert_seeded_request_is_the_same_alone_and_in_a_batch(engine, TEMP, MAX_TOKENS)


def _refusal(target, draft) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        compose(["model=local", f"model.path={target}", "runtime=cpu", *_draft(draft, 2)],
                launching=True)
    assert [x.field for x in e.value.errors] == ["specdecode.draft_model"]
    return e.value


def test_a_draft_with_another_vocab_size_is_refused_before_loading(target, tmp_path):
    other = make_checkpoint("llama", tmp_path, vocab_size=320)
    assert "vocab_size 320 is not the target's 256" in str(_refusal(target, other))


def test_a_missing_draft_or_one_atom_does_not_run_is_refused(target, tmp_path):
    assert "not a checkpoint directory" in str(_refusal(target, tmp_path / "absent"))
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"],
                                                 "vocab_size": 256}))
    assert "the draft's architecture GPT2LMHeadModel" in str(_refusal(target, odd))


def test_a_draft_whose_tokenizer_differs_is_refused(target, random_draft, tmp_path):
    t, d = tmp_path / "t", tmp_path / "d"
    shutil.copytree(target, t)
    shutil.copytree(random_draft, d)
    vocab = {f"tok{i}": i for i in range(256)}
    (t / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    (d / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {**vocab, "x": 3}}}))
    assert "tokenizer vocabulary is not the target's" in str(_refusal(t, d))
    (d / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    compose(["model=local", f"model.path={t}", "runtime=cpu", *_draft(d, 2)], launching=True)


def test_two_ranks_draft_and_verify_as_one_process(target, random_draft, plain_output):
    """Tensor parallelism on two gloo ranks: every rank runs its shard of the target and of the
    draft (one KV head of the draft's one, replicated), rank 0's drafts come back with its
    answer, and the output is one process's."""
    for draft in (target, random_draft):
        engine = _engine(target, *_draft(draft, 2), "parallel.tensor_parallel_size=2")
        try:
            got, _ = run(engine, _prompts(), GREEDY)
            s = engine.core.stats()
        finally:
            engine.shutdown()
        assert [flat(c) for c in got] == plain_output
        assert s.spec_draft_tokens > 0
        if draft == target:
            assert s.spec_accepted_tokens == s.spec_draft_tokens


GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("kernels", ["torch", "triton"])
@GPU[0]
@GPU[1]
def test_on_the_gpu_a_draft_model_keeps_greedy_output_and_sampled_drafts_run_the_kernel(
        target, random_draft, kernels):
    """float32 on CUDA (bf16 near-ties would make the comparison about rounding): greedy with
    a draft model is the plain output; sampled drafts go through the Triton rejection kernel."""
    cuda = on_cuda_f32(kernels)
    want = [flat(c) for c in run(_engine(target, *cuda), _prompts(), GREEDY)[0]]
    for draft in (random_draft, target):
        got = [flat(c) for c in run(_engine(target, *cuda, *_draft(draft, 3)), _prompts(),
                                    GREEDY)[0]]
        assert got == want
    engine = _engine(target, *cuda, *_draft(target, 3))
    sampled = SamplingParams(temperature=0.8, max_tokens=MAX_TOKENS, ignore_eos=True, seed=3)
    first = run(engine, _prompts(), sampled)[0]
    assert run(engine, _prompts(), sampled)[0] == first  # seeded: reproducible
    assert engine.core.stats().spec_accepted_tokens > 0


def _word_level_tokenizer(folder, size: int = 256) -> None:
    """A real tokenizer.json (tokenizers' WordLevel) of `size` ids."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    Tokenizer(WordLevel({f"t{i}": i for i in range(size)}, unk_token="t0")).save(
        str(folder / "tokenizer.json"))


@pytest.mark.parametrize("target_vocab,draft_vocab", [(256, 320), (320, 256)])
def test_a_draft_whose_config_pads_the_same_tokenizer_otherwise_runs_exactly(
        tmp_path, target_vocab, draft_vocab):
    """Qwen2.5-0.5B beside 7B: one tokenizer, vocab_size 151936 and 152064. The draft's logits
    are cut or padded (-inf) to the target's size; greedy output is the plain output."""
    target = make_checkpoint("llama", tmp_path, name="t", vocab_size=target_vocab)
    draft = make_checkpoint("llama", tmp_path, seed=5, name="d", vocab_size=draft_vocab)
    for folder in (target, draft):
        _word_level_tokenizer(folder)
    want = [flat(c) for c in run(_engine(target), _prompts(), GREEDY)[0]]
    engine = _engine(target, *_draft(draft, 3))
    got, _ = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == want
    assert engine.core.stats().spec_draft_tokens > 0


def test_a_padded_vocab_short_of_the_tokenizer_is_refused(tmp_path):
    target = make_checkpoint("llama", tmp_path, name="t")
    draft = make_checkpoint("llama", tmp_path, seed=5, name="d", vocab_size=200)
    for folder in (target, draft):
        _word_level_tokenizer(folder)
    assert "vocab_size 200 or the target's 256 is short of their tokenizer's 256 ids" in str(
        _refusal(target, draft))


def test_a_prompt_that_fills_its_blocks_gets_k_drafts_after_its_prefill(target):
    """8 tokens in blocks of 4: the draft's first positions lie past the prompt's blocks, so
    the scheduler adds them (from free blocks) when the prompt's last chunk is admitted."""
    engine = _engine(target, *_draft(target, 3))
    core = engine.core
    core.add_request(EngineRequest(request_id="0", prompt_token_ids=_prompts()[3][:8],
                                   sampling_params=GREEDY))
    core.step()
    assert len(core.scheduler.running[0].spec_token_ids) == 3
