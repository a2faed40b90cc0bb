"""fp8 checkpoints in every format atom reads, on tiny random llama / qwen3 / DeepSeek-V3 models.

Two oracles, both transformers on the checkpoint's dequantized twin:
- with each fp8 linear's input rounded to e4m3 as an fp8 GEMM rounds it (tests/quant/emulated.py):
  atom's logits must agree to float32 rounding and its greedy tokens exactly — every weight,
  scale, packing and activation scheme was read as the format defines it;
- plain: the fp8 activations are the only difference, so the logits' error is bounded by what
  e4m3 rounding of every linear's input costs.
"""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from atom import SamplingParams
from atom.kernels.fp8_reference import EmulatedFp8Linear
from atom.layers.moe import FusedMoE
from atom.model_engine.messages import EngineRequest
from tests.engine.checkpoints import local_engine
from tests.quant.emulated import emulate_fp8, emulate_fp8_experts
from tests.quant.fp8_checkpoints import FORMATS, KV_FORMATS, STATIC, write_fp8_checkpoint

ACTIVATIONS = {"ct_tensor_static": "static", "ct_channel_dynamic": "token", "fbgemm": "token",
               "fp8_block": "group", "fp8_tensor_static": "static",
               "ct_kv_tensor_static": "static", "modelopt_tensor_static": "static"}
# Block-scaled parts of one packed matrix (q | k | v, gate | up) must each span whole
# 128-row blocks, as in every published block checkpoint: the tiny models get 128-row parts.
BLOCK_SHAPES = {"llama": dict(num_key_value_heads=4, head_dim=32),
                "qwen3": dict(num_key_value_heads=4),
                "deepseek_v3_q_lora": dict(moe_intermediate_size=128),
                "deepseek_v3_q_full": dict(moe_intermediate_size=128)}
# The MoE cases' routed experts are fp8 too (R1's block format; the per-channel FP8-dynamic
# and FBGEMM releases of Qwen3-MoE), held so by FusedMoE (test_fp8_experts.py). The formats
# with KV-cache scales run here with the default bf16 cache, which ignores them
# (test_fp8_kv_scales.py runs them with an fp8 cache).
CASES = ([(a, f) for a in ("llama", "qwen3") for f in FORMATS]
         + [("llama", f) for f in KV_FORMATS]
         + [("deepseek_v3_q_lora", "fp8_block"), ("deepseek_v3_q_full", "fp8_block"),
            ("qwen3_moe", "ct_channel_dynamic"), ("qwen3_moe", "fbgemm")])
# e4m3 keeps 3 mantissa bits: each activation is rounded by up to 2^-4 of itself (~3.6% RMS
# for uniformly placed mantissas), at the input of every linear of these 2-layer models. The
# measured relative RMS error of the last-position logits is 1.1-4.5% over these cases.
PLAIN_REL_RMS = 0.08
MAX_NEW = 8


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory):
    arch, fmt = request.param
    over = BLOCK_SHAPES[arch] if fmt == "fp8_block" else {}
    ckpt = write_fp8_checkpoint(arch, fmt, tmp_path_factory.mktemp(f"{arch}-{fmt}"), **over)
    plain = AutoModelForCausalLM.from_pretrained(ckpt.dequantized, dtype=torch.float32).eval()
    emulated = emulate_fp8(AutoModelForCausalLM.from_pretrained(
        ckpt.dequantized, dtype=torch.float32).eval(), ckpt.fp8_modules, ACTIVATIONS[fmt],
        ckpt.input_scales or None)
    emulate_fp8_experts(emulated, ckpt.fp8_experts, ACTIVATIONS[fmt])
    engine = local_engine(ckpt.path, "scheduler.max_num_batched_tokens=64",
                          "kv_cache.block_size=16")
    return ckpt, plain, emulated, engine


def _prompts(lengths=(3, 17, 40, 90)) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


def prefill_logits(engine, prompts: list[list[int]]) -> torch.Tensor:
    """Last-position logits of one prefill step over every prompt (a fresh engine's)."""
    core = engine.core
    for i, p in enumerate(prompts):
        core.add_request(EngineRequest(request_id=f"l{i}", prompt_token_ids=p,
                                       sampling_params=SamplingParams(temperature=0, max_tokens=1)))
    inputs = core.executor.runner.prepare(core.scheduler.schedule().output([]))
    return core.executor.runner.forward(inputs.input_ids, inputs.positions, inputs.meta,
                                        inputs.logits_idx)


def triton_against_torch_on_the_gpu(path, check=None, *overrides: str) -> float:
    """Relative error of the Triton backend's prefill logits (CUDA graphs on) against the torch
    backend's emulation, bf16 on the GPU, over three prompts; `check(engine)` runs on each;
    `overrides`: both engines' further config."""
    from tests.engine.checkpoints import local_engine

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (3, 17, 40)]
    logits = {}
    for kernels in ("torch", "triton"):
        eng = local_engine(path, "runtime.device=cuda", f"runtime.kernels={kernels}",
                           f"runtime.enforce_eager={str(kernels == 'torch').lower()}",
                           "runtime.level=2", "kv_cache.num_blocks=64", *overrides)
        if check is not None:
            check(eng)
        logits[kernels] = prefill_logits(eng, prompts).float()
        eng.shutdown()
    return float((logits["triton"] - logits["torch"]).norm() / logits["torch"].norm())


@torch.no_grad()
def hf_greedy(model, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
    outs = []
    for p in prompts:
        ids = list(p)
        for _ in range(max_new):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        outs.append(ids[len(p):])
    return outs


def _fresh_engine(ckpt):
    return local_engine(ckpt.path, "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16")


def test_linears_hold_the_checkpoints_fp8_weights(case):
    ckpt, _, _, engine = case
    model = engine.core.executor.runner.model
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.o_proj.weight, EmulatedFp8Linear)  # the torch kernels' fp8 form
    proj = attn.o_proj.weight.fp8
    assert (proj.block_scale is not None) == (ckpt.fmt == "fp8_block")
    assert (proj.input_scale is not None) == (ckpt.fmt in STATIC)
    assert isinstance(model.lm_head.weight, torch.Tensor)
    if hasattr(attn, "kv_b_proj"):  # MLA reads it as a matrix: dequantized at load
        assert isinstance(attn.kv_b_proj.weight, torch.nn.Parameter)
    moe = [m for m in model.modules() if isinstance(m, FusedMoE)]
    assert bool(moe) == bool(ckpt.fp8_experts)
    for m in moe:  # the routed experts as the checkpoint's codes
        assert m.fp8 == ("block" if ckpt.fmt == "fp8_block" else "channel")
        assert m.w13.dtype == m.w2.dtype == torch.float8_e4m3fn


def test_logits_match_the_fp8_emulating_reference(case):
    ckpt, _, emulated, _ = case
    prompts = _prompts()[:3]
    ours = prefill_logits(_fresh_engine(ckpt), prompts)
    with torch.no_grad():
        for r, p in enumerate(prompts):
            ref = emulated(torch.tensor([p])).logits[0, -1]
            torch.testing.assert_close(ours[r], ref, rtol=1e-5, atol=1e-5)


def test_logits_within_fp8_tolerance_of_the_dequantized_weights(case):
    ckpt, plain, _, _ = case
    prompts = _prompts()[:3]
    ours = prefill_logits(_fresh_engine(ckpt), prompts)
    with torch.no_grad():
        for r, p in enumerate(prompts):
            ref = plain(torch.tensor([p])).logits[0, -1]
            err = (ours[r] - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()
            assert err <= PLAIN_REL_RMS, (r, float(err))
            assert err > 0, "the fp8 activations should make some difference"


def test_greedy_tokens_match_the_fp8_emulating_reference(case):
    """Through chunked prefill and decode steps (a 90-token prompt, 64-token steps)."""
    ckpt, _, emulated, engine = case
    prompts = _prompts()
    outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW,
                                                   ignore_eos=True))
    assert [o["token_ids"] for o in outs] == hf_greedy(emulated, prompts)
