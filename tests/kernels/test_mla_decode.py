"""Triton MLA decode attention (absorbed MQA over the paged latent cache) vs the torch reference:
one query per sequence and several (speculative verify, causal among them), contexts across
page boundaries, one split and several, bf16 and fp8 latents; at R1's widths on the GPU, and
captured in a CUDA graph that replays for new contexts."""
from __future__ import annotations

import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.mla_decode import mla_decode_attention
from kernel_helpers import DEVICE, gpu_param, paged_case, rel_err

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
TINY = (4, 32, 8)  # heads, kv_lora_rank, rope dims
R1 = 512, 64


def _case(q_lens, ctx_lens, heads, lora, rope, kv_dtype, page=16, seed=0):
    kv_scale = 0.05 if kv_dtype == FP8 else 1.0
    _, cache, _, meta = paged_case(q_lens, ctx_lens, 1, 1, lora + rope, page, BF16, kv_dtype,
                                   kv_scale, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    q = (torch.randn(sum(q_lens), heads, lora + rope, generator=g) * 0.3).to(BF16).to(DEVICE)
    return q, cache.squeeze(2), meta, kv_scale


def _check(q_lens, ctx_lens, heads, lora, rope, kv_dtype, **kw):
    q, cache, meta, kv_scale = _case(q_lens, ctx_lens, heads, lora, rope, kv_dtype)
    scale = (128 + rope) ** -0.5
    out = mla_decode_attention(q, cache, meta, lora, scale, kv_scale, **kw)
    ref = torch_ref.mla_decode_attention(q, cache, meta, lora, scale, kv_scale)
    assert out.shape == (q.shape[0], heads, lora)
    err = rel_err(out, ref)
    assert err < 1.5e-2, err


@pytest.mark.parametrize("splits", [1, 4], ids=["one-split", "four-splits"])
@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
def test_one_query_per_sequence_across_page_boundaries(kv_dtype, splits):
    _check([1] * 5, [1, 16, 17, 33, 70], *TINY, kv_dtype, splits=splits)


def test_more_splits_than_one_merge_chunk():
    """The merge sums its partials a chunk of MERGE_CHUNK splits at a time: 12 splits of 16-token
    tiles give a 130-token context splits in both chunks (the second part-masked), and shorter
    contexts empty splits in each."""
    from atom.kernels.triton.mla_decode import MERGE_CHUNK
    assert MERGE_CHUNK < 12 < 2 * MERGE_CHUNK
    _check([1, 1, 2], [130, 40, 100], *TINY, BF16, splits=12, block_n=16)


@pytest.mark.parametrize("splits", [1, 4], ids=["one-split", "four-splits"])
@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
def test_verify_queries_are_causal_among_themselves(kv_dtype, splits):
    """k + 1 queries per sequence at its last positions, mixed with one-query sequences."""
    _check([3, 1, 4, 2], [5, 20, 40, 17], *TINY, kv_dtype, splits=splits)


@pytest.mark.parametrize("splits", [1, 4], ids=["one-split", "four-splits"])
def test_padding_rows_without_context_are_zero(splits):
    """A CUDA graph pads its batch with context-0 rows: they come out as zeros (no NaN from an
    empty softmax) and leave the real rows as they are."""
    q, cache, meta, _ = _case([1] * 3, [20, 1, 37], *TINY, BF16)
    meta.context_lens[1] = 0
    scale = (128 + TINY[2]) ** -0.5
    out = mla_decode_attention(q, cache, meta, TINY[1], scale, 1.0, splits=splits)
    ref = torch_ref.mla_decode_attention(q, cache, meta, TINY[1], scale, 1.0)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert rel_err(out[[0, 2]], ref[[0, 2]]) < 1.5e-2


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("lora,rope", [(24, 8), (12, 6)], ids=["lora-in-second-half",
                                                             "lora-in-first-half"])
@pytest.mark.parametrize("splits", [1, 2], ids=["one-split", "two-splits"])
def test_widths_that_pad(lora, rope, kv_dtype, splits):
    """kv_lora_rank and rope dims off a power of two: the latent's two halves and the rope part
    are masked where they pad (L past the first half, or inside it)."""
    _check([1, 2], [20, 37], 4, lora, rope, kv_dtype, splits=splits)


def test_heads_past_one_tile():
    """More heads than one program's tile (tiles of 2 here): every head of every tile written."""
    _check([1, 2, 1], [9, 33, 50], 6, 32, 8, BF16, heads_per_tile=2, splits=2)


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("q_lens,ctx_lens,heads", [
    gpu_param([1] * 64, list(range(1024, 8193, 112))[:64], 16, id="r1-tp8-b64-1k-8k"),
    gpu_param([1] * 64, list(range(1024, 8193, 112))[:64], 128, id="r1-tp1-b64-1k-8k"),
    gpu_param([1] * 256, [1024 + 13 * i for i in range(256)], 16, id="r1-tp8-b256-1k"),
    gpu_param([1] * 256, [1024 + 13 * i for i in range(256)], 128, id="r1-tp1-b256-1k"),
    gpu_param([4] * 64, list(range(1024, 8193, 112))[:64], 128, id="r1-tp1-verify4-b64"),
    gpu_param([2] * 16, [8192] * 16, 16, id="r1-tp8-verify2-b16-8k"),
])
def test_r1_widths(q_lens, ctx_lens, heads, kv_dtype):
    _check(q_lens, ctx_lens, heads, *R1, kv_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
def test_cuda_graph_replays_with_new_contexts(kv_dtype):
    """Captured once (split-KV and its merge included), replayed after the context lengths and
    block tables change in place: the result follows the new contexts."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    lora, rope = R1
    q, cache, meta, kv_scale = _case([1] * 8, [3000] * 8, 16, lora, rope, kv_dtype)
    scale = 192 ** -0.5
    out = torch.empty(q.shape[0], 16, lora, dtype=q.dtype, device=q.device)
    mla_decode_attention(q, cache, meta, lora, scale, kv_scale, out=out)  # compiles
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mla_decode_attention(q, cache, meta, lora, scale, kv_scale, out=out)
    for ctx in ([1, 17, 3000, 2999, 64, 1000, 5, 2048], [2500] * 8):
        meta.context_lens.copy_(torch.tensor(ctx, dtype=torch.int32))
        meta.block_tables.copy_(meta.block_tables.roll(1, 0))  # every row holds 3000
        meta.context_lens_cpu = ctx
        graph.replay()
        torch.cuda.synchronize()
        ref = torch_ref.mla_decode_attention(q, cache, meta, lora, scale, kv_scale)
        assert rel_err(out, ref) < 1.5e-2



@pytest.mark.gpu
def test_mla_layer_decode_step_captures_in_cuda_graph():
    """The whole absorbed decode step of the layer on the triton backend (rotary + latent store,
    W_UK, attention, W_UV: no host sync) captured once and replayed for new contexts and slots;
    each replay matches the same layer on the torch backend, eager, over the same cache."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from atom.kernels.backend import get_backend
    from atom.layers.forward_context import ForwardContext
    from atom.layers.mla import MLAAttention
    from atom.layers.model_context import ModelContext

    heads, (lora, rope), nope, v = 16, R1, 128, 128
    batch, ctx0 = 8, [3000] * 8
    _, cache, meta, _ = _case([1] * batch, ctx0, heads, lora, rope, BF16)
    g = torch.Generator().manual_seed(3)
    rnd = lambda *shape: (torch.randn(*shape, generator=g) * 0.3).to(BF16).to(DEVICE)  # noqa
    w_kvb = rnd(heads * (nope + v), lora) / lora ** 0.5
    layers = {}
    for kernels in ("triton", "torch"):
        layer = MLAAttention(ModelContext(get_backend(kernels)), heads, nope, rope, v, lora,
                             (nope + rope) ** -0.5, 0).to(DEVICE, BF16)
        layer.absorb(w_kvb)
        layers[kernels] = layer
    q, kv_c, k_pe = rnd(batch, heads, nope + rope), rnd(batch, lora), rnd(batch, rope)
    positions = torch.zeros(batch, dtype=torch.long, device=DEVICE)
    cos_sin = rnd(8192, rope)

    def step(kernels: str, c: torch.Tensor) -> torch.Tensor:
        layer = layers[kernels]
        with layer.slot.using(ForwardContext(meta, [(c,)], [(1.0, 1.0)])):
            return layer(q, kv_c, k_pe, positions, cos_sin, False, w_kvb)

    step("triton", cache)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step("triton", cache)
    for ctx in ([1, 17, 3000, 2999, 64, 1000, 5, 2048], [2500] * 8):
        meta.context_lens.copy_(torch.tensor(ctx, dtype=torch.int32))
        positions.copy_(torch.tensor(ctx) - 1)
        slots = [int(meta.block_tables[i, (c - 1) // 16]) * 16 + (c - 1) % 16
                 for i, c in enumerate(ctx)]
        meta.slot_mapping.copy_(torch.tensor(slots))
        meta.context_lens_cpu = ctx
        ref_cache = cache.clone()
        graph.replay()
        ref = step("torch", ref_cache)
        assert rel_err(out, ref) < 1.5e-2
        stored = cache.view(-1, lora + rope)[meta.slot_mapping]
        assert rel_err(stored, ref_cache.view(-1, lora + rope)[meta.slot_mapping]) < 1e-2
