"""Speculative decoding with an EAGLE-3 head (specdecode=eagle3), end to end on a tiny llama
target and tiny random heads written under the published checkpoints' names: the head's first
draft is what an independent torch EAGLE-3 over transformers' hidden states proposes, greedy
output is the plain output token for token, stops inside accepted runs end where the plain
output ends, and at temperature > 0 the rejection sampler keeps the target's distribution."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from atom import SamplingParams
from atom.config.compose import compose
from atom.config.errors import ConfigError
from atom.model_engine.messages import EngineRequest
from atom.spec_decode.stats import mtp_stats_json
from tests.engine.checkpoints import ARCHS, COMMON, local_engine, make_checkpoint
from tests.engine.spec_steps import (assert_seeded_request_is_the_same_alone_and_in_a_batch,
                                     assert_stops_where_plain_stops, chain_pvalue, flat,
                                     on_cuda_f32, run, transition)
from tests.engine.spec_steps import spec_engine as _engine, spec_prompts as _prompts

MAX_TOKENS = 24
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
H, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, DRAFT_VOCAB = 64, 4, 2, 16, 128, 256, 96
TARGET_LAYERS = 6  # aux layers 2, 3, 3


def make_eagle3(root, seed: int = 3, norm_before_residual: bool = False):
    """A random EAGLE-3 head for the tiny llama target (COMMON's sizes and its rope, as the
    published heads carry their target's), with a reduced
    vocabulary of DRAFT_VOCAB target ids (d2t offsets, t2d mask) and a copy of an embedding
    the loader must leave out."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.2  # noqa: E731
    ids = torch.randperm(VOCAB, generator=g)[:DRAFT_VOCAB].sort().values
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[ids] = True
    tensors = {
        "fc.weight": r(H, 3 * H), "norm.weight": 1 + r(H), "lm_head.weight": r(DRAFT_VOCAB, H),
        "d2t": ids - torch.arange(DRAFT_VOCAB), "t2d": t2d, "embed_tokens.weight": r(VOCAB, H),
        "midlayer.input_layernorm.weight": 1 + r(H), "midlayer.hidden_norm.weight": 1 + r(H),
        "midlayer.post_attention_layernorm.weight": 1 + r(H),
        "midlayer.self_attn.q_proj.weight": r(HEADS * HEAD_DIM, 2 * H),
        "midlayer.self_attn.k_proj.weight": r(KV_HEADS * HEAD_DIM, 2 * H),
        "midlayer.self_attn.v_proj.weight": r(KV_HEADS * HEAD_DIM, 2 * H),
        "midlayer.self_attn.o_proj.weight": r(H, HEADS * HEAD_DIM),
        "midlayer.mlp.gate_proj.weight": r(INTER, H), "midlayer.mlp.up_proj.weight": r(INTER, H),
        "midlayer.mlp.down_proj.weight": r(H, INTER),
    }
    out = root / f"eagle3_{seed}_{norm_before_residual}"
    out.mkdir()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {**COMMON, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
              "num_hidden_layers": 1, "draft_vocab_size": DRAFT_VOCAB, "hidden_act": "silu",
              **ARCHS["llama"][1], "torch_dtype": "float32",
              "norm_before_residual": norm_before_residual}
    (out / "config.json").write_text(json.dumps(config))
    return out


def _eagle3(path, k: int) -> tuple[str, ...]:
    return ("specdecode=eagle3", f"specdecode.draft_model={path}",
            f"specdecode.num_speculative_tokens={k}")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("target"),
                           num_hidden_layers=TARGET_LAYERS)


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    return {nbr: make_eagle3(root, norm_before_residual=nbr) for nbr in (False, True)}


@pytest.fixture(scope="module")
def plain_output(target):
    return [flat(c) for c in run(_engine(target), _prompts(), GREEDY)[0]]


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + COMMON["rms_norm_eps"]) * w


def _reference_first_draft(target, head, prompt: list[int]) -> int:
    """EAGLE-3's first draft after the prompt, in plain torch over transformers' hidden states
    (hidden_states[i] is the input of layer i): position i reads fc of the states at i and the
    embedding of the token after i (the prompt's, then the target's greedy token); the draft
    is the argmax of the last position's logits, mapped through d2t."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    hf = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    w = load_file(str(head / "model.safetensors"))
    nbr = json.loads((head / "config.json").read_text())["norm_before_residual"]
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), output_hidden_states=True)
        first = int(out.logits[0, -1].argmax())
        hs = out.hidden_states
        aux = torch.cat([hs[2][0], hs[3][0], hs[3][0]], -1)
        nxt = torch.tensor(prompt[1:] + [first])
        e = _rms(hf.model.embed_tokens(nxt), w["midlayer.input_layernorm.weight"])
        hidden = aux @ w["fc.weight"].T
        h = _rms(hidden, w["midlayer.hidden_norm.weight"])
        residual = h if nbr else hidden
        x = torch.cat([e, h], -1)
        n = len(prompt)
        q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(n, HEADS, HEAD_DIM).transpose(0, 1)
        k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(n, KV_HEADS, HEAD_DIM).transpose(0, 1)
        v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(n, KV_HEADS, HEAD_DIM).transpose(0, 1)
        cos, sin = hf.model.rotary_emb(x.unsqueeze(0), torch.arange(n).unsqueeze(0))
        q, k = apply_rotary_pos_emb(q.unsqueeze(0), k.unsqueeze(0), cos, sin)
        rep = HEADS // KV_HEADS
        k, v = k[0].repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        a = F.scaled_dot_product_attention(q[0], k, v, is_causal=True)
        a = a.transpose(0, 1).reshape(n, -1) @ w["midlayer.self_attn.o_proj.weight"].T
        residual = a + residual
        m = _rms(residual, w["midlayer.post_attention_layernorm.weight"])
        m = (F.silu(m @ w["midlayer.mlp.gate_proj.weight"].T) * (m @ w["midlayer.mlp.up_proj.weight"].T)
             ) @ w["midlayer.mlp.down_proj.weight"].T
        y = _rms(m + residual, w["norm.weight"])
        d = int((y[-1] @ w["lm_head.weight"].T).argmax())
    return d + int(w["d2t"][d])


@pytest.mark.parametrize("nbr", [False, True], ids=["eagle3", "norm_before_residual"])
def test_the_first_draft_is_the_reference_eagle3s(target, heads, nbr):
    engine = _engine(target, *_eagle3(heads[nbr], 1))
    core = engine.core
    for i, prompt in enumerate(_prompts()):
        core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=prompt,
                                       sampling_params=GREEDY))
        core.step()
        seq = next(s for s in core.scheduler.running if s.request_id == str(i))
        assert seq.spec_token_ids == [_reference_first_draft(target, heads[nbr], prompt)], i


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_output_with_a_random_eagle3_head_is_the_plain_output(target, heads,
                                                                     plain_output, k):
    engine = _engine(target, *_eagle3(heads[False], k))
    got, _ = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == plain_output
    s = engine.core.stats()
    assert s.spec_draft_tokens > 0
    assert s.spec_accepted_tokens <= 0.1 * s.spec_draft_tokens


@pytest.mark.parametrize("extra", [("kv_cache.num_blocks=16", "scheduler.reserve_ratio=0",
                                    "scheduler.max_num_batched_tokens=8"),
                                   ("kv_cache.enable_prefix_caching=true",)],
                         ids=["chunked_and_preempting", "prefix_cache"])
def test_chunked_prefill_preemption_and_prefix_caching_keep_greedy_output(
        target, heads, plain_output, extra):
    engine = _engine(target, *_eagle3(heads[True], 3), *extra)
    got, _ = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == plain_output
    if "kv_cache.num_blocks=16" in extra:
        assert engine.core.stats().num_preempted_total > 0


def test_sampled_output_is_reproducible_and_keeps_greedy_rows_exact(target, heads,
                                                                     plain_output):
    """Seeded rows at temperature 0.8 beside greedy rows: the greedy rows are the plain
    output, and the seeded rows draw the same tokens twice (q over the target's vocabulary,
    zero outside the head's)."""
    engine = _engine(target, *_eagle3(heads[False], 2))
    sampled = SamplingParams(temperature=0.8, max_tokens=MAX_TOKENS, ignore_eos=True, seed=3)
    first = engine.generate(_prompts(), sampled)
    again = engine.generate(_prompts(), sampled)
    assert [o["token_ids"] for o in first] == [o["token_ids"] for o in again]
    assert [flat(c) for c in run(engine, _prompts(), GREEDY)[0]] == plain_output


def _refusal(target, head) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        compose(["model=local", f"model.path={target}", "runtime=cpu", *_eagle3(head, 2)],
                launching=True)
    return e.value


def test_a_checkpoint_that_is_no_eagle3_head_is_refused(target):
    e = _refusal(target, target)
    assert [x.field for x in e.errors] == ["specdecode.draft_model"]
    assert "is no EAGLE-3 head" in str(e)


def test_a_target_that_is_no_llama_or_qwen_is_refused(tmp_path, heads):
    moe = make_checkpoint("qwen3_moe", tmp_path)
    e = _refusal(moe, heads[False])
    assert [x.field for x in e.errors] == ["specdecode.method"]
    assert "EAGLE-3 over Qwen3MoeForCausalLM is not implemented" in str(e)


def test_a_head_of_another_width_is_refused(tmp_path, heads):
    narrow = make_checkpoint("llama", tmp_path, hidden_size=32, num_attention_heads=2)
    e = _refusal(narrow, heads[False])
    assert [x.field for x in e.errors] == ["specdecode.draft_model"]
    assert "hidden_size 64 is not the target's 32" in str(e)


def _context_free_target(root):
    """A llama whose logits at a position are a function of that position's token (every
    o_proj and down_proj zero: the residual stream is the embedding)."""
    from safetensors.torch import load_file, save_file

    path = make_checkpoint("llama", root, name="context_free", num_hidden_layers=TARGET_LAYERS)
    tensors = load_file(str(path / "model.safetensors"))
    for name, t in tensors.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            t.zero_()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def make_self_drafting_eagle3(root, target, head_noise: float = 0.0):
    """A full-vocabulary head that computes what the context-free target will: its attention
    reads only the embedding half of its input (q = k = 5 [I, 0] per head, 4 KV heads, so each
    position attends to itself: a diagonal score 16 * 25 / 4 = 100 against off-diagonal ones
    near 25), v = [I, 0] and o = I pass the normed embedding of the next token through, fc,
    hidden_norm and down_proj are zero (with norm_before_residual the residual stays zero at
    every depth), and norm and lm_head are the target's: its logits at position i are the
    target's at i + 1. head_noise > 0 perturbs lm_head by that fraction of its spread."""
    from safetensors.torch import load_file, save_file

    t = load_file(str(target / "model.safetensors"))
    eye, zero = torch.eye(H), torch.zeros(H, H)
    half = torch.cat([eye, zero], 1)
    head = t["lm_head.weight"]
    noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(2))
    tensors = {
        "fc.weight": torch.zeros(H, 3 * H), "norm.weight": t["model.norm.weight"].clone(),
        "lm_head.weight": head + head_noise * head.std() * noise,
        "midlayer.input_layernorm.weight": torch.ones(H),
        "midlayer.hidden_norm.weight": torch.zeros(H),
        "midlayer.post_attention_layernorm.weight": torch.ones(H),
        "midlayer.self_attn.q_proj.weight": 5 * half, "midlayer.self_attn.k_proj.weight": 5 * half,
        "midlayer.self_attn.v_proj.weight": half.clone(), "midlayer.self_attn.o_proj.weight": eye,
        "midlayer.mlp.gate_proj.weight": torch.zeros(INTER, H),
        "midlayer.mlp.up_proj.weight": torch.zeros(INTER, H),
        "midlayer.mlp.down_proj.weight": torch.zeros(H, INTER),
    }
    out = root / f"self_eagle3_{head_noise}"
    out.mkdir()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {**COMMON, **ARCHS["llama"][1], "architectures": ["LlamaForCausalLMEagle3"],
              "model_type": "llama", "num_hidden_layers": 1, "num_key_value_heads": HEADS,
              "hidden_act": "silu", "torch_dtype": "float32", "norm_before_residual": True}
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def context_free(tmp_path_factory):
    root = tmp_path_factory.mktemp("context_free")
    path = _context_free_target(root)
    return path, make_self_drafting_eagle3(root, path)


@pytest.mark.parametrize("k", [1, 3])
def test_a_self_drafting_head_is_always_accepted_and_exact(context_free, k):
    path, head = context_free
    plain, plain_steps = run(_engine(path), _prompts(), GREEDY)
    engine = _engine(path, *_eagle3(head, k))
    got, steps = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == [flat(c) for c in plain]
    s = engine.core.stats()
    assert s.spec_draft_tokens > 0 and s.spec_accepted_tokens == s.spec_draft_tokens
    assert steps < plain_steps
    stats = mtp_stats_json(s, "eagle3")
    assert stats["acceptance_rate"] == 1.0 and stats["per_position_acceptance"] == [1.0] * k


@pytest.mark.parametrize("how", ["max_tokens", "stop_token", "eos"])
def test_a_stop_inside_an_accepted_run_ends_where_the_plain_output_ends(context_free, how):
    path, head = context_free
    plain, spec = _engine(path), _engine(path, *_eagle3(head, 3))
    assert_stops_where_plain_stops(plain, spec, _prompts()[2:3], how, MAX_TOKENS)


def test_sampled_output_through_the_rejection_sampler_has_the_targets_distribution(
        context_free, tmp_path):
    """Top-k 3 at temperature 0.1, k = 2 drafts sampled from a head whose lm_head is a
    perturbed copy of the target's: over 3,000 one-token prompts the outputs (t1..t4) follow
    the target's chain (chi-square, 0.1% level), with both acceptances and rejections seen."""
    path, _ = context_free
    head = make_self_drafting_eagle3(tmp_path, path, head_noise=0.5)
    n, x = 3000, 17
    params = SamplingParams(temperature=0.1, top_k=3, max_tokens=4, ignore_eos=True)
    engine = local_engine(path, *_eagle3(head, 2), "scheduler.max_num_seqs=256")
    outs = [o["token_ids"] for o in engine.generate([[x]] * n, params)]
    s = engine.core.stats()
    assert 0.2 * s.spec_draft_tokens < s.spec_accepted_tokens < 0.95 * s.spec_draft_tokens
    assert chain_pvalue(outs, transition(path, 3, 0.1), x) > 1e-3


def test_a_seeded_sampled_request_is_the_same_alone_and_in_a_batch(context_free, tmp_path):
    """Its generator decides every number its target samples, its drafts and its rejection
    draws use, so the rows beside it change nothing."""
    path, _ = context_free
    engine = _engine(path, *_eagle3(make_self_drafting_eagle3(tmp_path, path, 0.5), 2))
    assert_seeded_request_is_the_same_alone_and_in_a_batch(engine, 0.1, MAX_TOKENS)


def test_two_ranks_draft_and_verify_as_one_process(context_free):
    """Tensor parallelism on two gloo ranks: the head's attention and its reduced-vocabulary
    LM head are sharded like the target's, every rank captures its target's states, and the
    output is one process's, every draft accepted."""
    path, head = context_free
    want = [flat(c) for c in run(_engine(path), _prompts(), GREEDY)[0]]
    engine = _engine(path, *_eagle3(head, 2), "parallel.tensor_parallel_size=2")
    try:
        got, _ = run(engine, _prompts(), GREEDY)
        s = engine.core.stats()
    finally:
        engine.shutdown()
    assert [flat(c) for c in got] == want
    assert s.spec_draft_tokens > 0 and s.spec_accepted_tokens == s.spec_draft_tokens


GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("kernels", ["torch", "triton"])
@GPU[0]
@GPU[1]
def test_on_the_gpu_eagle3_keeps_greedy_output_and_sampled_drafts_run_the_kernel(
        target, heads, context_free, kernels):
    """float32 on CUDA: greedy with a random head (reduced vocabulary) is the plain output, a
    self-drafting head is accepted every time, seeded sampled rows are reproducible."""
    cuda = on_cuda_f32(kernels)
    want = [flat(c) for c in run(_engine(target, *cuda), _prompts(), GREEDY)[0]]
    got = [flat(c) for c in run(_engine(target, *cuda, *_eagle3(heads[False], 3)), _prompts(),
                                GREEDY)[0]]
    assert got == want
    path, head = context_free
    engine = _engine(path, *cuda, *_eagle3(head, 3))
    run(engine, _prompts(), GREEDY)
    s = engine.core.stats()
    assert s.spec_accepted_tokens == s.spec_draft_tokens > 0
    sampled = SamplingParams(temperature=0.8, max_tokens=MAX_TOKENS, ignore_eos=True, seed=3)
    first = run(engine, _prompts(), sampled)[0]
    assert run(engine, _prompts(), sampled)[0] == first


def test_the_aux_layers_are_the_configs_or_eagle3s_default():
    from transformers import LlamaConfig

    from atom.models.eagle3 import aux_layer_ids

    assert aux_layer_ids(LlamaConfig(), 32) == (2, 16, 29)
    assert aux_layer_ids(LlamaConfig(eagle_config={"eagle_aux_hidden_state_layer_ids":
                                                   [1, 5, 9]}), 32) == (1, 5, 9)
    assert aux_layer_ids(LlamaConfig(eagle_aux_hidden_state_layer_ids=[3, 4, 5]), 32) == (3, 4, 5)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_greedy_output_over_a_qwen_target_is_the_plain_output(tmp_path, heads, arch):
    """The Qwen layers take the llama layer's (positions, x, residual), so the capture reads
    them the same way (Qwen3: q/k norms and its own head_dim inside; the head's are its own)."""
    target = make_checkpoint(arch, tmp_path, num_hidden_layers=TARGET_LAYERS)
    want = [flat(c) for c in run(_engine(target), _prompts(), GREEDY)[0]]
    engine = _engine(target, *_eagle3(heads[False], 3))
    got, _ = run(engine, _prompts(), GREEDY)
    assert [flat(c) for c in got] == want
    assert engine.core.stats().spec_draft_tokens > 0


def test_a_head_with_a_reduced_vocabulary_runs_on_dummy_weights(target, tmp_path):
    """The GPU benchmark's set-up (benchmarks/eagle3_bench.py): a head given by its config alone,
    load.dummy=xavier for target and head; d2t, an integer table, is filled with zeros (the
    draft's ids are the target's first DRAFT_VOCAB), so every draft is a target id and forced
    acceptance gives its rate."""
    head = tmp_path / "dummy_head"
    head.mkdir()
    config = {**COMMON, **ARCHS["llama"][1], "architectures": ["LlamaForCausalLMEagle3"],
              "model_type": "llama", "num_hidden_layers": 1, "draft_vocab_size": DRAFT_VOCAB,
              "hidden_act": "silu", "torch_dtype": "float32"}
    (head / "config.json").write_text(json.dumps(config))
    engine = _engine(target, "load.dummy=xavier", *_eagle3(head, 3),
                     "specdecode.acceptance_length=3.0")
    d2t = engine.core.executor.runner.drafter.head.d2t
    assert d2t is not None and d2t.shape == (DRAFT_VOCAB,) and not d2t.any()
    got, _ = run(engine, _prompts(), SamplingParams(temperature=0, max_tokens=48,
                                                    ignore_eos=True))
    assert all(len(flat(c)) == 48 for c in got)
    s = engine.core.stats()
    assert s.spec_draft_tokens > 50
    assert abs(1 + s.spec_accepted_tokens / s.spec_verify_forwards - 3.0) < 0.4
