"""quant=fp8 on a float checkpoint: every linear quantized per output channel at load, its
activations per token; and fp8 dummy weights at real shapes.

The oracle is transformers on the same float checkpoint with each linear's weight rounded to
e4m3 under its channel's amax / 448 and its input rounded per token (tests/quant/emulated.py)."""
from __future__ import annotations

import re

import pytest
import torch
from transformers import AutoModelForCausalLM

import atom
from atom import SamplingParams
from atom.kernels.fp8_reference import EmulatedFp8Linear
from atom.layers.linear import LinearBase
from atom.layers.moe import FusedMoE
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.quant.emulated import emulate_fp8, emulate_fp8_experts, quantize_per_channel
from tests.quant.test_fp8_checkpoints import PLAIN_REL_RMS, hf_greedy, prefill_logits

_LINEAR = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp|mlp\.shared_experts)\."
                     r"[a-z_]+_proj(_with_mqa)?$")


@pytest.fixture(scope="module", params=["llama", "qwen3", "qwen3_moe", "deepseek_v3_q_lora"])
def online(request, tmp_path_factory):
    """The MoE models' routed experts are quantized too: each expert's gate, up and down rows
    per channel, their inputs per token."""
    path = make_checkpoint(request.param, tmp_path_factory.mktemp("online"))
    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    emulated = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    modules = {n for n, m in emulated.named_modules()
               if isinstance(m, torch.nn.Linear) and _LINEAR.match(n)
               and not n.endswith("kv_b_proj")}
    experts = {n for n, m in emulated.named_modules() if hasattr(m, "gate_up_proj")}
    with torch.no_grad():
        for n in modules:
            w = emulated.get_submodule(n).weight
            w.copy_(quantize_per_channel(w))
        for n in experts:
            m = emulated.get_submodule(n)
            for w in (m.gate_up_proj, m.down_proj):
                w.copy_(torch.stack([quantize_per_channel(we) for we in w]))
    emulate_fp8_experts(emulated, experts, "token")
    return path, plain, emulate_fp8(emulated, modules, "token")


def _engine(path):
    return local_engine(path, "quant=fp8", "scheduler.max_num_batched_tokens=64")


def _prompts(lengths=(3, 17, 40, 90)) -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


def test_online_fp8_logits_match_the_emulating_reference(online):
    path, plain, emulated = online
    prompts = _prompts()[:3]
    ours = prefill_logits(_engine(path), prompts)
    with torch.no_grad():
        for r, p in enumerate(prompts):
            ids = torch.tensor([p])
            torch.testing.assert_close(ours[r], emulated(ids).logits[0, -1], rtol=1e-5, atol=1e-5)
            ref = plain(ids).logits[0, -1]
            err = (ours[r] - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()
            assert 0 < err <= PLAIN_REL_RMS, (r, float(err))


def test_online_fp8_greedy_tokens_match_the_emulating_reference(online):
    path, _, emulated = online
    prompts = _prompts()
    outs = _engine(path).generate(prompts, SamplingParams(temperature=0, max_tokens=8,
                                                          ignore_eos=True))
    assert [o["token_ids"] for o in outs] == hf_greedy(emulated, prompts)


def test_online_fp8_leaves_embeddings_head_norms_and_routers_float(tmp_path):
    path = make_checkpoint("qwen3_moe", tmp_path)
    model = _engine(path).core.executor.runner.model
    layer = model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj.weight, EmulatedFp8Linear)
    assert isinstance(layer.mlp.gate.weight, torch.nn.Parameter)  # the router
    assert isinstance(model.lm_head.weight, torch.nn.Parameter)
    assert isinstance(model.model.embed_tokens.weight, torch.nn.Parameter)
    assert layer.input_layernorm.weight.dtype == torch.float32


@pytest.mark.parametrize("model,quant", [("tiny_llama", "fp8"), ("tiny_qwen3", "fp8"),
                                         ("tiny_deepseek_v3", "fp8_block")])
def test_dummy_fp8_weights_are_realistic_codes(model, quant):
    """load=dummy with fp8: every linear and routed expert in e4m3 with the filled values'
    scales, never zeros (block-fp8 experts: 128-wide, as R1's)."""
    wide = ["model.hf_config.moe_intermediate_size=128"] if model == "tiny_deepseek_v3" else []
    engine = atom.build_engine(atom.compose([f"model={model}", "load=dummy", "runtime=cpu",
                                             f"quant={quant}", "load.progress_bar=false", *wide]))
    net = engine.core.executor.runner.model
    linears = [m for m in net.modules() if isinstance(m, LinearBase) and not m.keep_float]
    assert linears
    for m in linears:
        assert isinstance(m.weight, EmulatedFp8Linear)
        w = m.weight.fp8
        scale = w.weight_scale if quant == "fp8" else w.block_scale
        assert (scale > 0).all() and (w.qweight.float().abs().amax() == 448)
        assert (w.block_scale is not None) == (quant == "fp8_block")
    for m in (m for m in net.modules() if isinstance(m, FusedMoE)):
        assert m.fp8 == ("block" if quant == "fp8_block" else "channel")
        for codes, scale in ((m.w13, m.w13_scale), (m.w2, m.w2_scale)):
            assert codes.dtype == torch.float8_e4m3fn and (scale > 0).all()
            assert scale.dim() == (3 if quant == "fp8_block" else 2)
            assert (codes.float().abs().flatten(1).amax(1) == 448).all()
    out = engine.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=4))
    assert len(out[0]["token_ids"]) == 4


def test_deepseek_dummy_weights_take_the_configs_block_fp8():
    """R1's quantization_config on a described model (quant=auto): block-fp8 dummy weights."""
    engine = atom.build_engine(atom.compose([
        "model=tiny_deepseek_v3", "load=dummy", "runtime=cpu", "load.progress_bar=false",
        "model.hf_config.moe_intermediate_size=128",
        "+model.hf_config.quantization_config={quant_method:fp8,fmt:e4m3,"
        "activation_scheme:dynamic,weight_block_size:[128,128]}"]))
    attn = engine.core.executor.runner.model.model.layers[0].self_attn
    assert attn.q_a_proj.weight.fp8.block_scale is not None
    assert isinstance(attn.kv_b_proj.weight, torch.nn.Parameter)
    experts = engine.core.executor.runner.model.model.layers[1].mlp.experts
    assert experts.w13.dtype == torch.float8_e4m3fn and experts.w13_scale.shape == (8, 2, 1)
    out = engine.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=4))
    assert len(out[0]["token_ids"]) == 4
