"""fp8 checkpoints' KV-cache scales: read per layer, used by an fp8 cache, ignored by a bf16 one.

The oracle is transformers on the dequantized twin with the linears' inputs rounded as an fp8
GEMM rounds them (tests/quant/emulated.py) and K and V rounded as the fp8 cache holds them under
the checkpoint's scales (tests/quant/fp8_kv.py). The calibrated scales (~amax / 448, far below
1) change the cache's rounding, so a run at scale 1.0 gives other logits: the check that the
scales reach the attention, not just the cache's bookkeeping.
"""
from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from atom import SamplingParams
from atom.loader.kv_scales import checkpoint_kv_scales, read_kv_scales
from tests.engine.checkpoints import local_engine
from tests.quant.emulated import emulate_fp8
from tests.quant.fp8_checkpoints import KV_FORMATS, write_fp8_checkpoint
from tests.quant.fp8_kv import emulate_fp8_kv
from tests.quant.test_fp8_checkpoints import (hf_greedy, prefill_logits,
                                              triton_against_torch_on_the_gpu)

FP8_KV = ("kv_cache.dtype=fp8", "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16")
# The logits of a cache rounded under the calibrated scales (~1.4e-3 here) against one at
# scale 1.0, relative RMS: at 1.0 these models' K and V (|x| <= ~0.6) fall mostly under 2^-6,
# e4m3's smallest normal, and lose mantissa bits. Measured 3.3-3.6%; the runs agree with their
# references to 6e-8.
MIN_SCALE_EFFECT = 0.01


def _prompts(lengths: tuple[int, ...], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


PROMPTS = (3, 17, 40)  # one prefill step's prompt lengths


def _reference(ckpt, scales: dict[int, tuple[float, float]]):
    model = AutoModelForCausalLM.from_pretrained(ckpt.dequantized, dtype=torch.float32).eval()
    return emulate_fp8_kv(emulate_fp8(model, ckpt.fp8_modules, "static", ckpt.input_scales),
                          scales)


@pytest.fixture(scope="module", params=KV_FORMATS)
def case(request, tmp_path_factory):
    fmt = request.param
    ckpt = write_fp8_checkpoint("llama", fmt, tmp_path_factory.mktemp(fmt))
    return ckpt, _reference(ckpt, ckpt.kv_scales)


def _logits(engine) -> torch.Tensor:
    return prefill_logits(engine, _prompts(PROMPTS, 1))


def _last_logits(ref) -> torch.Tensor:
    prompts = _prompts(PROMPTS, 1)
    with torch.no_grad():
        return torch.stack([ref(torch.tensor([p])).logits[0, -1] for p in prompts])


def test_the_checkpoint_carries_scales_far_from_one(case):
    ckpt, _ = case
    assert set(ckpt.kv_scales) == {0, 1}
    assert all(s < 0.1 for pair in ckpt.kv_scales.values() for s in pair), ckpt.kv_scales


def test_an_fp8_cache_takes_each_layers_scales_from_the_checkpoint(case):
    ckpt, _ = case
    kv = local_engine(ckpt.path, *FP8_KV).core.executor.runner.kv
    assert kv.spec.dtype == torch.float8_e4m3fn
    assert kv.scales == [ckpt.kv_scales[i] for i in range(2)]


def test_fp8_kv_logits_match_the_reference_with_the_checkpoints_scales(case):
    ckpt, ref = case
    ours = _logits(local_engine(ckpt.path, *FP8_KV))
    torch.testing.assert_close(ours, _last_logits(ref), rtol=1e-5, atol=1e-5)


def test_a_cache_forced_to_scale_one_gives_other_logits(case):
    """The same engine with its scales list set to 1.0 matches the reference at 1.0, and both
    differ from the calibrated run by far more than the tolerance."""
    ckpt, ref = case
    engine = local_engine(ckpt.path, *FP8_KV)
    scaled = _logits(engine)
    engine = local_engine(ckpt.path, *FP8_KV)
    engine.core.executor.runner.kv.scales[:] = [(1.0, 1.0)] * 2
    unscaled = _logits(engine)
    ref_one = _reference(ckpt, {i: (1.0, 1.0) for i in range(2)})
    torch.testing.assert_close(unscaled, _last_logits(ref_one), rtol=1e-5, atol=1e-5)
    effect = (scaled - unscaled).norm() / scaled.norm()
    assert effect > MIN_SCALE_EFFECT, float(effect)


def test_greedy_tokens_with_an_fp8_cache_match_the_reference(case):
    """Through chunked prefill and decode steps (a 90-token prompt, 64-token steps), the
    cache's earlier tokens read back under the same scales."""
    ckpt, ref = case
    prompts = _prompts((5, 90), 2)
    outs = local_engine(ckpt.path, *FP8_KV).generate(
        prompts, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    assert [o["token_ids"] for o in outs] == hf_greedy(ref, prompts)


def test_a_bf16_cache_reads_the_scales_and_ignores_them(case, caplog):
    ckpt, _ = case
    with caplog.at_level(logging.INFO, logger="atom.runner"):
        kv = local_engine(ckpt.path, "kv_cache.block_size=16").core.executor.runner.kv
    assert kv.spec.dtype == torch.float32  # bf16: the model's dtype on the CPU
    assert kv.scales == [(1.0, 1.0)] * 2
    assert any("KV-cache scales (2 layers) are unused" in r.getMessage() for r in caplog.records)


def _scales_file(tmp_path, tensors: dict[str, torch.Tensor]):
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return [path]


def test_every_producers_scale_names_are_read(tmp_path):
    one = lambda v: torch.tensor([v], dtype=torch.bfloat16)  # noqa: E731
    files = _scales_file(tmp_path, {
        "model.layers.0.self_attn.k_scale": one(0.5), "model.layers.0.self_attn.v_scale": one(0.25),
        "model.layers.1.self_attn.k_proj.k_scale": torch.tensor(0.125),
        "model.layers.1.self_attn.v_proj.v_scale": torch.tensor(2.0),
        "model.layers.2.self_attn.attn.k_scale": torch.tensor(3.0),
        "model.layers.2.self_attn.attn.v_scale": torch.tensor(4.0),
        "model.layers.3.self_attn.kv_scale": torch.tensor(0.75),  # deprecated: K and V
        "model.layers.3.self_attn.k_proj.weight": torch.zeros(2, 2)})
    assert read_kv_scales(files) == {0: (0.5, 0.25), 1: (0.125, 2.0), 2: (3.0, 4.0),
                                     3: (0.75, 0.75)}
    assert checkpoint_kv_scales(files, True, 2) == {0: (0.5, 0.25), 1: (0.125, 2.0)}


@pytest.mark.parametrize("tensors,match", [
    ({"model.layers.0.self_attn.k_scale": torch.ones(2),
      "model.layers.0.self_attn.v_scale": torch.ones(1)}, "one positive finite value"),
    ({"model.layers.0.self_attn.k_scale": torch.tensor(0.0),
      "model.layers.0.self_attn.v_scale": torch.tensor(1.0)}, "one positive finite value"),
    ({"model.layers.0.self_attn.k_scale": torch.tensor(1.0)}, "needs both"),
])
def test_a_scale_the_cache_cannot_use_is_refused(tmp_path, tensors, match):
    with pytest.raises(ValueError, match=match):
        read_kv_scales(_scales_file(tmp_path, tensors))


def test_declared_scales_under_no_name_atom_reads_are_refused(tmp_path):
    files = _scales_file(tmp_path, {"model.layers.0.self_attn.k_cache_scale": torch.tensor(1.0)})
    with pytest.raises(ValueError, match="declares fp8 KV-cache scales"):
        checkpoint_kv_scales(files, True, 1)
    assert checkpoint_kv_scales(files, False, 1) == {}


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", KV_FORMATS)
def test_triton_with_an_fp8_cache_matches_the_torch_engine_on_the_checkpoints_scales(
        tmp_path, fmt):
    """bf16 on the GPU: the Triton KV store and attention kernels (CUDA graphs on, the scales
    captured in them) against the torch backend, both under the checkpoint's scales."""
    ckpt = write_fp8_checkpoint("llama", fmt, tmp_path)

    def check(engine):
        assert engine.core.executor.runner.kv.scales == [ckpt.kv_scales[i] for i in range(2)]

    err = triton_against_torch_on_the_gpu(ckpt.path, check, "kv_cache.dtype=fp8")
    assert err <= 2e-2, err
