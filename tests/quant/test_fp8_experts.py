"""Routed experts in fp8: a block-fp8 DeepSeek-V3 checkpoint (R1's format: every
`...mlp.experts.N.{gate,up,down}_proj.weight` e4m3 with its `weight_scale_inv`) keeps its experts
as the checkpoint's codes and scales, sharded over tensor- or expert-parallel ranks, and the
torch reference computes them as an fp8 GEMM does.

The logits and greedy tokens against transformers on the dequantized twin (each expert's
inputs rounded as the kernels round them) are test_fp8_checkpoints' deepseek cases; here: what
is held, in how many bytes, the reference's arithmetic against the formats' definitions, the
ranks, the refusals, and the Triton kernel against the reference on the GPU.
"""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from atom import SamplingParams
from atom.config.compose import compose
from atom.config.errors import ConfigError
from atom.kernels import torch_ref
from atom.kernels.expert_quant import quantize_experts
from atom.layers.moe import FusedMoE, softmax_topk
from tests.engine.checkpoints import local_engine
from tests.quant.emulated import fake_quant
from tests.quant.fp8_checkpoints import write_fp8_checkpoint

E4M3 = torch.float8_e4m3fn
# Each rank's share of every block-scaled matrix whole 128-row blocks at tp=2: q_b_proj
# 8 · 64 rows, kv_b_proj 8 · 64, o_proj's 8 · 32 input columns, the dense and shared MLPs'
# 256, and each routed expert's 256 (128 a rank).
DEEPSEEK_TP2 = dict(num_attention_heads=8, num_key_value_heads=8, qk_nope_head_dim=32,
                    qk_rope_head_dim=32, v_head_dim=32, intermediate_size=256,
                    moe_intermediate_size=256)


def _moe_layers(engine) -> list[FusedMoE]:
    return [m for m in engine.core.executor.runner.model.modules() if isinstance(m, FusedMoE)]


def _expert_bytes(layers: list[FusedMoE]) -> int:
    return sum(t.nbytes for m in layers for t in (m.w13, m.w2, m.w13_scale, m.w2_scale)
               if t is not None)


def test_block_fp8_experts_hold_the_checkpoints_codes_and_scales(tmp_path):
    ckpt = write_fp8_checkpoint("deepseek_v3_q_lora", "fp8_block", tmp_path,
                                moe_intermediate_size=128)
    state = load_file(str(ckpt.path / "model.safetensors"))
    fp8 = _moe_layers(local_engine(ckpt.path))
    assert len(fp8) == 1  # layer 0 is dense (first_k_dense_replace)
    m = fp8[0]
    assert m.fp8 == "block" and m.w13.dtype == m.w2.dtype == E4M3
    assert m.w13_scale.shape == (8, 2, 1) and m.w2_scale.shape == (8, 1, 1)
    for e in range(8):
        stem = f"model.layers.1.mlp.experts.{e}."
        codes = torch.cat([state[stem + "gate_proj.weight"], state[stem + "up_proj.weight"]])
        assert torch.equal(m.w13[e].view(torch.uint8), codes.view(torch.uint8))
        assert torch.equal(m.w2[e].view(torch.uint8),
                           state[stem + "down_proj.weight"].view(torch.uint8))
        assert torch.equal(m.w13_scale[e], torch.cat([state[stem + "gate_proj.weight_scale_inv"],
                                                      state[stem + "up_proj.weight_scale_inv"]]))
        assert torch.equal(m.w2_scale[e], state[stem + "down_proj.weight_scale_inv"])
    # One byte a weight and one float32 per 128 x 128 block, against float32's four (CPU).
    float_layers = _moe_layers(local_engine(ckpt.dequantized))
    assert float_layers[0].w13.dtype == torch.float32 and float_layers[0].w13_scale is None
    weights = 8 * 3 * 128 * 64
    assert _expert_bytes(fp8) == weights + 4 * 8 * 3
    assert _expert_bytes(float_layers) == 4 * weights


@pytest.mark.parametrize("fmt", ["channel", "block"])
@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_holds_its_share_of_each_experts_quantized_matrices(fmt, rank):
    """Float experts (quant=fp8), per-expert tensors or fused [E, 2I, H] / [E, H, I] ones, at
    tp=2: each part quantized whole, then this rank's rows of gate and up and columns of down
    kept with their scales — what quantizing the whole matrix and slicing it gives."""
    from atom.kernels.backend import get_backend
    from atom.kernels.fp8_weight import quantize
    from atom.layers.model_context import ModelContext
    from atom.layers.parallel_state import ParallelState

    g = torch.Generator().manual_seed(rank)
    e, hidden, inter = 2, 192, 256
    w13 = torch.randn(e, 2 * inter, hidden, generator=g)
    w2 = torch.randn(e, hidden, inter, generator=g)
    mc = ModelContext(get_backend("torch"), ParallelState(tp_size=2, tp_rank=rank),
                      fp8_experts=fmt)
    fused, per_expert = FusedMoE(mc, e, hidden, inter), FusedMoE(mc, e, hidden, inter)
    fused.weight_loader(fused.w13, w13, ("all", "gate_up"))
    fused.weight_loader(fused.w2, w2, ("all", "down"))
    for i in range(e):
        per_expert.weight_loader(per_expert.w13, w13[i, :inter], (i, "gate"))
        per_expert.weight_loader(per_expert.w13, w13[i, inter:], (i, "up"))
        per_expert.weight_loader(per_expert.w2, w2[i], (i, "down"))
    r, n, block = rank * 128, 128, fmt == "block"
    for m in (fused, per_expert):
        for i in range(e):
            gate = quantize(w13[i, :inter], block).rows(r, n)
            up = quantize(w13[i, inter:], block).rows(r, n)
            down = quantize(w2[i], block).columns(r, n)
            scales = [(w.block_scale if block else w.weight_scale) for w in (gate, up, down)]
            assert torch.equal(m.w13[i].view(torch.uint8), torch.cat(
                [gate.qweight, up.qweight]).view(torch.uint8))
            assert torch.equal(m.w2[i].view(torch.uint8), down.qweight.view(torch.uint8))
            assert torch.equal(m.w13_scale[i], torch.cat(scales[:2]))
            assert torch.equal(m.w2_scale[i], scales[2])


def _definition(x, w13, s13, w2, s2, weights, experts, block: bool) -> torch.Tensor:
    """The fp8 expert loop from the formats' definitions: weight = code × its channel's or
    block's scale; each GEMM's input rounded to e4m3 per token (per 128 columns of a token
    with block scales)."""
    act = "group" if block else "token"

    def dense(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        if not block:
            return codes.float() * scale[:, None]
        n, k = codes.shape
        return codes.float() * scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    out = torch.zeros_like(x)
    for e in experts.unique().tolist():
        tok, slot = (experts == e).nonzero(as_tuple=True)
        gate, up = (fake_quant(x[tok], act) @ dense(w13[e], s13[e]).T).chunk(2, dim=-1)
        h = torch.nn.functional.silu(gate) * up
        y = fake_quant(h, act) @ dense(w2[e], s2[e]).T
        out.index_add_(0, tok, y * weights[tok, slot, None])
    return out


@pytest.mark.parametrize("block", [False, True], ids=["per_channel", "block_128"])
@pytest.mark.parametrize("t", [1, 9, 40])
def test_the_reference_computes_fp8_experts_as_the_formats_define(t, block):
    """hidden 192: a partial last 128-column block of w13, and of the activations' groups."""
    g = torch.Generator().manual_seed(t)
    e, hidden, inter = 8, 192, 128
    x = torch.randn(t, hidden, generator=g)
    w13 = torch.randn(e, 2 * inter, hidden, generator=g) * hidden ** -0.5
    w2 = torch.randn(e, hidden, inter, generator=g) * inter ** -0.5
    weights, experts = softmax_topk(torch.randn(t, e, generator=g), 2, renormalize=True)
    (c13, s13), (c2, s2) = quantize_experts(w13, block), quantize_experts(w2, block)
    ours = torch_ref.fused_moe(x, c13, c2, weights, experts, s13, s2)
    ref = _definition(x, c13, s13, c2, s2, weights, experts, block)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    plain = torch_ref.fused_moe(x, w13, w2, weights, experts)
    assert 0 < (ours - plain).norm() / plain.norm() < 0.1  # fp8 rounds, and only that much


@pytest.mark.parametrize("split", ["tensor", "expert"])
def test_two_ranks_give_the_one_process_tokens(tmp_path, split):
    """tp=2 shards each expert's width (block scales with it); ep=2 gives each rank four
    whole experts. Activations are scaled per 128 columns, on the shards' boundaries, so the
    ranks round them as one process does."""
    ckpt = write_fp8_checkpoint("deepseek_v3_q_lora", "fp8_block", tmp_path, **DEEPSEEK_TP2)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 256, (k,), generator=g).tolist() for k in (5, 31, 70)]
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    common = ("kv_cache.num_blocks=64", "scheduler.max_num_batched_tokens=48")
    one = local_engine(ckpt.path, *common).generate(prompts, greedy)
    ranks = local_engine(ckpt.path, *common, "parallel.tensor_parallel_size=2",
                         f"parallel.enable_expert_parallel={str(split == 'expert').lower()}")
    try:
        two = ranks.generate(prompts, greedy)
    finally:
        ranks.shutdown()
    assert [o["token_ids"] for o in two] == [o["token_ids"] for o in one]


BLOCK_QC = ("+model.hf_config.quantization_config={quant_method:fp8,fmt:e4m3,"
            "activation_scheme:dynamic,weight_block_size:[128,128]}")


@pytest.mark.parametrize("overrides,field,value", [
    ([], "model.hf_config.moe_intermediate_size", 32),
    (["model.hf_config.moe_intermediate_size=128", "parallel=tp2"],
     "parallel.tensor_parallel_size", 2),
    (["model.hf_config.moe_intermediate_size=96", "parallel=tp2",
      "parallel.enable_expert_parallel=true"], "model.hf_config.moe_intermediate_size", 96),
])
def test_block_fp8_expert_widths_off_the_blocks_are_refused_by_name(overrides, field, value):
    with pytest.raises(ConfigError) as e:
        compose(["model=tiny_deepseek_v3", "load=dummy", BLOCK_QC, *overrides])
    assert (field, value) in [(x.field, x.value) for x in e.value.errors]


def test_block_fp8_experts_whole_blocks_a_rank_compose():
    for overrides in (["model.hf_config.moe_intermediate_size=256", "parallel=tp2"],
                      ["model.hf_config.moe_intermediate_size=128", "parallel=tp2",
                       "parallel.enable_expert_parallel=true"]):
        compose(["model=tiny_deepseek_v3", "load=dummy", BLOCK_QC, *overrides])


# The GPU: the Triton fused MoE's fp8 experts against the reference the torch backend runs.

R1_BLOCK = [(1, 256, 8, 7168, 2048), (64, 256, 8, 7168, 2048), (2048, 256, 8, 7168, 256)]
QWEN3_30B_CHANNEL = [(1, 128, 8, 2048, 768), (512, 128, 8, 2048, 768)]


@pytest.mark.gpu
@pytest.mark.parametrize("t,e,k,hidden,inter,block",
                         [(*s, True) for s in R1_BLOCK] + [(*s, False) for s in QWEN3_30B_CHANNEL],
                         ids=[f"r1-block-t{s[0]}-i{s[4]}" for s in R1_BLOCK]
                         + [f"qwen3-30b-channel-t{s[0]}" for s in QWEN3_30B_CHANNEL])
def test_triton_fp8_experts_match_the_torch_reference(t, e, k, hidden, inter, block):
    """Both quantize the activations alike (the Triton quantizers match the reference's
    arithmetic byte for byte on the GPU), so what remains is the float32 sum order and bf16
    roundings, and what they do to the second GEMM's input: re-quantized to e4m3 (steps of
    2^-3 relative), where a one-ulp bf16 difference in the first GEMM's output moves a code a
    whole step. The bound, 2%, leaves a margin over test_fused_moe's 1.5% (against its own
    loop) for this reference's float32 sum of the k slots (the kernel rounds each slot's row
    to bf16 first)."""
    from atom.kernels.triton_backend import TritonBackend

    g = torch.Generator(device="cuda").manual_seed(t + inter)

    def randn(*shape: int) -> torch.Tensor:  # bf16 from the start: R1's w13 is 7.5 G values
        return torch.randn(*shape, device="cuda", generator=g, dtype=torch.bfloat16)
    x = randn(t, hidden)
    c13, s13 = quantize_experts(randn(e, 2 * inter, hidden).mul_(hidden ** -0.5), block)
    c2, s2 = quantize_experts(randn(e, hidden, inter).mul_(inter ** -0.5), block)
    weights, experts = softmax_topk(torch.randn(t, e, device="cuda", generator=g), k, True)
    ours = TritonBackend().fused_moe(x, c13, c2, weights, experts, w13_scale=s13, w2_scale=s2)
    ref = torch_ref.fused_moe(x, c13, c2, weights, experts, s13, s2)
    assert ours.dtype == torch.bfloat16
    err = (ours.float() - ref.float()).norm() / ref.float().norm()
    assert err <= 2e-2, float(err)


@pytest.mark.gpu
def test_triton_engine_matches_the_torch_engine_on_a_block_fp8_deepseek(tmp_path):
    """The tiny DeepSeek block-fp8 checkpoint, bf16 on the GPU: experts through the Triton
    fused MoE (CUDA graphs on) against the torch backend's emulation, prefill logits."""
    from tests.quant.test_fp8_checkpoints import triton_against_torch_on_the_gpu

    def experts_stay_fp8(eng) -> None:
        assert _moe_layers(eng)[0].w13.dtype == E4M3

    ckpt = write_fp8_checkpoint("deepseek_v3_q_lora", "fp8_block", tmp_path,
                                moe_intermediate_size=128)
    err = triton_against_torch_on_the_gpu(ckpt.path, experts_stay_fp8)
    assert err <= 2e-2, err
