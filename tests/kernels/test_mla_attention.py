"""MLA over the paged latent cache (torch reference): the absorbed form (W_UK in the query, W_UV
on the output, MQA over the latents) equals the up-projected one and an explicit dense
attention, for sequences with one query, several (speculative verify, chunked prefill over a
cached prefix) and no prefix; the latent store writes [kv_c | rotated k_pe] to its slots only;
the layer splits a mixed step between the two forms (on the torch and the triton kernels)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.backend import get_backend
from atom.layers.forward_context import ForwardContext
from atom.layers.mla import MLAAttention
from atom.layers.model_context import ModelContext
from tests.kernels.kernel_helpers import paged_case, rel_err

H = 4
Q_LENS, CTX_LENS = [1, 4, 1, 7, 3], [9, 30, 17, 7, 40]
DIMS = {"tiny": (16, 8, 24, 32), "r1": (128, 64, 128, 512)}  # nope, rope, v, kv_lora_rank


def _layer(nope: int, rope: int, v: int, lora: int, kernels: str = "torch") -> MLAAttention:
    return MLAAttention(ModelContext(get_backend(kernels)), H, nope, rope, v, lora,
                        (nope + rope) ** -0.5, layer_idx=0)


def _case(dims, kv_dtype=torch.float32, kv_scale=1.0, seed=0):
    nope, rope, v, lora = dims
    q, cache, _, meta = paged_case(Q_LENS, CTX_LENS, H, 1, lora + rope, 16, torch.float32,
                                   kv_dtype, kv_scale, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(q.shape[0], H, nope + rope, generator=g)
    w_kvb = torch.randn(H * (nope + v), lora, generator=g) / lora ** 0.5
    layer = _layer(nope, rope, v, lora)
    layer.absorb(w_kvb)
    return q, cache.squeeze(2), meta, w_kvb, layer


def _dense(q, cache, meta, w_kvb, layer, kv_scale=1.0):
    """Each sequence's keys and values made explicit from its latents, softmax by hand."""
    nope, lora = layer.nope, layer.kv_lora_rank
    out, start = [], 0
    for i, (ql, cl) in enumerate(zip(meta.q_lens_cpu, meta.context_lens_cpu)):
        lat = torch_ref._dequant(torch_ref.gather_kv(cache, meta.block_tables[i], cl), kv_scale,
                                 torch.float32)
        kv = (lat[:, :lora] @ w_kvb.T).view(cl, H, -1)
        k = torch.cat([kv[..., :nope], lat[:, None, lora:].expand(cl, H, -1)], dim=-1)
        s = torch.einsum("qhd,khd->hqk", q[start:start + ql], k) * layer.scale
        mask = torch.arange(cl)[None] <= torch.arange(cl - ql, cl)[:, None]
        p = s.masked_fill(~mask, float("-inf")).softmax(-1)
        out.append(torch.einsum("hqk,khd->qhd", p, kv[..., nope:]))
        start += ql
    return torch.cat(out)


@pytest.mark.parametrize("dims", list(DIMS), ids=list(DIMS))
def test_absorbed_equals_up_projected_and_dense(dims):
    q, cache, meta, w_kvb, layer = _case(DIMS[dims])
    q_nope, q_pe = q.split([layer.nope, layer.rope], dim=-1)
    absorbed = layer.absorbed(q_nope, q_pe, cache, meta, 1.0)
    up = torch_ref.mla_prefill_attention(q, cache, meta, w_kvb, layer.nope, layer.scale, 1.0)
    dense = _dense(q, cache, meta, w_kvb, layer)
    assert absorbed.shape == up.shape == (sum(Q_LENS), H, layer.v_head_dim)
    assert rel_err(up, dense) < 2e-5
    assert rel_err(absorbed, dense) < 2e-5


def test_fp8_latents_read_the_same_either_way():
    q, cache, meta, w_kvb, layer = _case(DIMS["tiny"], torch.float8_e4m3fn, kv_scale=0.5)
    q_nope, q_pe = q.split([layer.nope, layer.rope], dim=-1)
    absorbed = layer.absorbed(q_nope, q_pe, cache, meta, 0.5)
    up = torch_ref.mla_prefill_attention(q, cache, meta, w_kvb, layer.nope, layer.scale, 0.5)
    assert rel_err(absorbed, _dense(q, cache, meta, w_kvb, layer, 0.5)) < 2e-5
    assert rel_err(up, absorbed) < 2e-5


def test_up_projected_from_a_later_sequence_reads_its_own_rows():
    """first_seq: q holds only the tail's tokens, from row 0; sequence indices stay absolute."""
    q, cache, meta, w_kvb, layer = _case(DIMS["tiny"])
    whole = torch_ref.mla_prefill_attention(q, cache, meta, w_kvb, layer.nope, layer.scale, 1.0)
    skip = sum(Q_LENS[:2])
    tail = torch_ref.mla_prefill_attention(q[skip:], cache, meta, w_kvb, layer.nope, layer.scale,
                                           1.0, first_seq=2)
    torch.testing.assert_close(tail, whole[skip:])


@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_layer_splits_short_queries_from_prefills(kernels):
    """A mixed step: the leading sequences of at most ABSORBED_MAX_Q queries (decodes and
    verifies) through the absorbed path, the rest up-projected; the same as every sequence
    up-projected. The store writes each new token's latent; the cache's other slots keep what
    they held."""
    from atom.layers.mla import ABSORBED_MAX_Q, absorbed_head

    nope, rope, v, lora = DIMS["tiny"]
    q_lens, ctx_lens = [1, 4, 1, ABSORBED_MAX_Q + 12, 3], [12, 33, 9, 20, 40]
    _, cache, _, meta = paged_case(q_lens, ctx_lens, H, 1, lora + rope, 16, torch.float32,
                                   torch.float32)
    cache = cache.squeeze(2)
    meta = dataclasses.replace(meta, num_decode_seqs=1)
    t = sum(q_lens)
    assert absorbed_head(meta, t)[:2] == (3, 6)
    g = torch.Generator().manual_seed(5)
    q, kv_c, k_pe = (torch.randn(t, H, nope + rope, generator=g), torch.randn(t, lora, generator=g),
                     torch.randn(t, rope, generator=g))
    w_kvb = torch.randn(H * (nope + v), lora, generator=g) / lora ** 0.5
    layer = _layer(nope, rope, v, lora, kernels)
    layer.absorb(w_kvb)
    positions = torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx_lens)])
    cos_sin = torch.randn(64, rope)
    before = cache.clone()
    stored = before.clone()
    with layer.slot.using(ForwardContext(meta, [(stored,)], [(1.0, 1.0)])):
        mixed = layer(q, kv_c, k_pe, positions, cos_sin, False, w_kvb)
    q_rot, rotated = torch_ref.rotary(positions, q[..., nope:], k_pe.unsqueeze(1), cos_sin, False)
    all_up = torch_ref.mla_prefill_attention(torch.cat([q[..., :nope], q_rot], -1), stored, meta,
                                             w_kvb, nope, layer.scale, 1.0)
    assert rel_err(mixed, all_up.reshape(t, -1)) < 2e-5
    flat, flat_before = stored.view(-1, lora + rope), before.view(-1, lora + rope)
    torch.testing.assert_close(flat[meta.slot_mapping], torch.cat([kv_c, rotated[:, 0]], -1))
    untouched = torch.ones(flat.shape[0], dtype=torch.bool)
    untouched[meta.slot_mapping] = False
    assert torch.equal(flat[untouched], flat_before[untouched])
