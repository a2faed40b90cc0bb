"""atom's DeepseekV3ForCausalLM vs transformers' own modeling_deepseek_v3 on tiny random
checkpoints (fp32, CPU), with and without q_lora_rank: greedy tokens, prefill logits, and the
log-probability of every decoded token (the absorbed-MLA path); a batch of mixed lengths with
chunked prefill and preemption, prefix caching, and a checkpoint that carries an MTP layer."""
from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import atom
from atom import SamplingParams
from atom.model_engine.messages import EngineRequest
from tests.engine.checkpoints import DEEPSEEK_ARCHS, make_checkpoint

MAX_NEW = 12


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    return {a: make_checkpoint(a, root) for a in DEEPSEEK_ARCHS}


@pytest.fixture(scope="module")
def hf_models(checkpoints):
    from transformers import AutoModelForCausalLM

    return {a: AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval()
            for a, p in checkpoints.items()}


def _prompts(seed: int = 1, lengths=(3, 17, 40, 5, 90, 33, 64, 9)) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)  # 90 > max_num_batched_tokens below
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


@torch.no_grad()
def _hf_greedy(model, prompts, max_new=MAX_NEW) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy tokens and each one's log-probability, by a plain argmax loop over full
    recomputes (no generation-config rule in the way)."""
    tokens, logprobs = [], []
    for p in prompts:
        ids, lps = list(p), []
        for _ in range(max_new):
            logp = model(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
            ids.append(int(logp.argmax()))
            lps.append(float(logp[ids[-1]]))
        tokens.append(ids[len(p):])
        logprobs.append(lps)
    return tokens, logprobs


def _engine(path, *extra: str):
    return atom.build_engine(atom.compose(
        ["model=local", f"model.path={path}", "runtime=cpu", "load.progress_bar=false",
         "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16", *extra]))


def _run(engine, prompts, max_new=MAX_NEW) -> tuple[list[list[int]], list[list[float]]]:
    params = SamplingParams(temperature=0, max_tokens=max_new, ignore_eos=True, logprobs=0)
    rids = engine.add_request(prompts, params)
    tokens = {r: [] for r in rids}
    logprobs = {r: [] for r in rids}
    while not engine.is_finished():
        for out in engine.core.step():
            tokens[out.request_id].extend(out.new_token_ids)
            logprobs[out.request_id].extend(r.logprob for r in out.logprobs or [])
    return [tokens[r] for r in rids], [logprobs[r] for r in rids]


@pytest.mark.parametrize("arch", list(DEEPSEEK_ARCHS))
def test_greedy_tokens_and_decode_logprobs_match_transformers(checkpoints, hf_models, arch):
    prompts = _prompts()
    expected, expected_lp = _hf_greedy(hf_models[arch], prompts)
    # 14 blocks of 16 tokens cannot hold all eight sequences at once, and admission keeps no
    # reserve: forces preemption; the 90-token prompt is prefilled in chunks of at most 64.
    engine = _engine(checkpoints[arch], "kv_cache.num_blocks=14", "scheduler.reserve_ratio=0")
    got, got_lp = _run(engine, prompts)
    assert got == expected
    assert engine.stats().num_preempted_total > 0, "the KV budget was meant to force preemption"
    assert [len(lp) for lp in got_lp] == [MAX_NEW] * len(prompts)
    for ours, ref in zip(got_lp, expected_lp):
        assert ours == pytest.approx(ref, abs=1e-4)


@pytest.mark.parametrize("arch", list(DEEPSEEK_ARCHS))
def test_prefill_logits_match(checkpoints, hf_models, arch):
    prompts = _prompts()[:3]
    core = _engine(checkpoints[arch]).core
    for i, p in enumerate(prompts):
        core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=p,
                                       sampling_params=SamplingParams(temperature=0, max_tokens=1)))
    runner = core.executor.runner
    inputs = runner.prepare(core.scheduler.schedule().output([]))
    ours = runner.forward(inputs.input_ids, inputs.positions, inputs.meta, inputs.logits_idx)
    assert len(inputs.rows) == 3
    with torch.no_grad():
        for r, p in enumerate(prompts):
            ref = hf_models[arch](torch.tensor([p])).logits[0, -1]
            torch.testing.assert_close(ours[r], ref, rtol=1e-4, atol=1e-4)


def test_prefix_cache_hits_attend_over_the_cached_latents(checkpoints, hf_models):
    arch = "deepseek_v3_q_lora"
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(3, 256, (40,), generator=g).tolist()
    prompts = [shared + torch.randint(3, 256, (n,), generator=g).tolist() for n in (1, 7, 20, 33)]
    expected, _ = _hf_greedy(hf_models[arch], prompts, max_new=8)
    engine = _engine(checkpoints[arch], "kv_cache.enable_prefix_caching=true")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    first = engine.generate(prompts[:1], params)
    rest = engine.generate(prompts[1:], params)
    assert [o["num_cached_tokens"] for o in rest] == [32, 32, 32]  # the shared 2 full blocks
    assert [o["token_ids"] for o in first + rest] == expected


def test_mtp_layer_in_the_checkpoint_is_skipped(checkpoints, tmp_path):
    """R1 stores its MTP module as decoder layer num_hidden_layers (model.layers.61.*): it
    loads past it, and what it generates does not change."""
    src = checkpoints["deepseek_v3_q_lora"]
    dst = tmp_path / "with_mtp"
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    layer1 = {k: v for k, v in tensors.items() if k.startswith("model.layers.1.")}
    mtp = {k.replace("model.layers.1.", "model.layers.2."): v.clone() for k, v in layer1.items()}
    hidden = tensors["model.norm.weight"].shape[0]
    mtp.update({"model.layers.2.eh_proj.weight": torch.randn(hidden, 2 * hidden),
                "model.layers.2.enorm.weight": torch.ones(hidden),
                "model.layers.2.hnorm.weight": torch.ones(hidden),
                "model.layers.2.shared_head.norm.weight": torch.ones(hidden)})
    save_file({**tensors, **mtp}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    prompts = _prompts(lengths=(5, 21))
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    with_mtp = _engine(dst).generate(prompts, params)
    plain = _engine(src).generate(prompts, params)
    assert [o["token_ids"] for o in with_mtp] == [o["token_ids"] for o in plain]


def test_tiny_config_runs_on_dummy_weights():
    """conf/model/tiny_deepseek_v3.yaml: the absorbed weights are made after a dummy fill too
    (left empty, decode would read uninitialized memory and differ from prefill)."""
    engine = atom.build_engine(atom.compose(["model=tiny_deepseek_v3", "load=dummy",
                                             "load.dummy=xavier", "runtime=cpu"]))
    attn = engine.core.executor.runner.model.model.layers[0].self_attn
    w = attn.kv_b_proj.weight.view(attn.attn.num_heads, -1, attn.kv_lora_rank)
    assert torch.equal(attn.attn.w_uk, w[:, :attn.nope])
    out = engine.generate([[5, 6, 7, 8]], SamplingParams(temperature=0, max_tokens=4,
                                                          ignore_eos=True))
    assert len(out[0]["token_ids"]) == 4


@pytest.mark.parametrize("override,field", [  # block fp8 runs: tests/quant/
    ("model.hf_config.scoring_func=softmax", "model.hf_config.scoring_func"),
    ("model.hf_config.topk_method=greedy", "model.hf_config.topk_method"),
])
def test_what_cannot_run_is_refused_naming_the_field(override, field):
    from atom.config.errors import ConfigError

    cfg = atom.compose(["model=tiny_deepseek_v3", "load=dummy", "runtime=cpu", override])
    with pytest.raises(ConfigError, match=field):
        atom.build_engine(cfg)


def test_level3_compiled_forward_matches_eager_without_recompiling():
    """Under torch.compile the MLA layers (and the expert loop) run eagerly between graphs: the
    compiled forward gives eager's logits, and fresh metadata and routings reuse its graphs."""
    from atom.runner.compile import CompiledForward
    from tests.engine.stepping import SteppedBatch
    from tests.engine.test_compile_level3 import _build, _CountingBackend, _schedule

    torch._dynamo.reset()
    cfg = atom.compose(["model=tiny_deepseek_v3", "load=dummy", "load.dummy=xavier",
                        "runtime=cpu"])
    model = _build(cfg)
    counting = _CountingBackend()
    compiled = CompiledForward(model, counting)
    schedule = _schedule(model.hf_config.vocab_size)
    try:
        eager_batch, compiled_batch = SteppedBatch(model, 3), SteppedBatch(model, 3)
        for new in schedule:
            want = eager_batch.step(model, new)
            torch.testing.assert_close(compiled_batch.step(compiled, new), want, rtol=1e-5,
                                       atol=1e-5)
        built = counting.graphs
        fresh = SteppedBatch(model, 3)
        for new in schedule:
            fresh.step(compiled, new)
        assert counting.graphs == built
    finally:
        torch._dynamo.reset()


def test_verify_steps_keep_greedy_output(checkpoints):
    """Multi-token steps (a decoding sequence feeds its last token and k drafts): whatever the
    drafts, the greedy output is the one-token-per-step output, and right drafts save steps;
    rejected drafts' latents are left past the valid length and overwritten later."""
    from tests.engine.test_multi_token_steps import MAX_TOKENS, SYNC, _run_with_drafts

    path = checkpoints["deepseek_v3_q_lora"]
    prompts = _prompts(lengths=(6, 13, 9))
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    reference = [o["token_ids"] for o in _engine(path).generate(prompts, greedy)]
    engine = _engine(path, "kv_cache.block_size=4", *SYNC)
    _, plain_steps = _run_with_drafts(engine, prompts, reference, lambda out, ref: [])
    right = lambda out, ref: ref[len(out):len(out) + 3]  # noqa: E731
    wrong = lambda out, ref: [(t + 1) % 256 for t in ref[len(out):len(out) + 2]]  # noqa: E731
    for guess in (right, wrong):
        tokens, steps = _run_with_drafts(engine, prompts, reference, guess)
        assert tokens == reference
        if guess is right:
            assert steps < plain_steps - 5, (steps, plain_steps)


def test_r1_config_builds_r1s_shapes():
    """conf/model/deepseek_r1.yaml, built on the meta device (no memory): DeepSeek-V3's published
    671B parameters (685B with the MTP module, which is not built), a 576-wide latent per token
    and layer, and one rotary table for all 61 layers."""
    from atom.models.deepseek_v3 import DeepseekV3ForCausalLM, DeepseekV3MoE
    from atom.loader.hf_config import load_hf_config
    from atom.models.llama import LlamaMLP
    from atom.kernels.backend import get_backend
    from atom.layers.model_context import ModelContext
    from atom.runner.kv_cache import model_kv_spec

    hf = load_hf_config(atom.compose(["model=deepseek_r1", "load=dummy"]))
    with torch.device("meta"):
        model = DeepseekV3ForCausalLM(hf, ModelContext(get_backend("torch")))
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(671e9, rel=1e-3)
    spec = model_kv_spec(model, torch.bfloat16, 64)
    assert spec.num_layers == 61 and {s.latent_dim for s in spec.layers} == {512 + 64}
    tables = {id(m.self_attn.rotary_emb) for m in model.model.layers}
    assert len(tables) == 1
    assert isinstance(model.model.layers[2].mlp, LlamaMLP)  # first_k_dense_replace = 3
    assert isinstance(model.model.layers[3].mlp, DeepseekV3MoE)
