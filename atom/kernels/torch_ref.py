"""Reference implementations in plain torch: the oracle for every other backend, and the CPU path.

Written for clarity and exactness (float32 accumulation), not speed.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from atom.kernels.backend import add_rms_norm_linear_unfused, rope_store_kv_unfused
from atom.kernels.expert_quant import expert_weight
from atom.kernels.fp8_reference import EmulatedFp8Linear, fp8_linear
from atom.kernels.fp8_weight import Fp8Weight
from atom.kernels.metadata import AttentionMetadata


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype) if x.dtype != torch.float32 else xf * weight


def rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
           is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    cos_sin = cos_sin_cache.index_select(0, positions.long())
    cos, sin = cos_sin.chunk(2, dim=-1)  # [T, rot/2]
    return _rotate(q, cos, sin, is_neox), _rotate(k, cos, sin, is_neox)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    rot = cos.shape[-1] * 2
    xr, xpass = x[..., :rot].float(), x[..., rot:]
    cos, sin = cos.unsqueeze(1).float(), sin.unsqueeze(1).float()
    if is_neox:
        x1, x2 = xr.chunk(2, dim=-1)
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([out.to(x.dtype), xpass], dim=-1)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, k_scale: float, v_scale: float) -> None:
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    kc = k_cache.view(-1, *k_cache.shape[2:])
    vc = v_cache.view(-1, *v_cache.shape[2:])
    kc[slots] = _quant(k[keep], k_cache.dtype, k_scale)
    vc[slots] = _quant(v[keep], v_cache.dtype, v_scale)


def _quant(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    if dtype == torch.float8_e4m3fn:
        return (x.float() / scale).clamp(-448.0, 448.0).to(dtype)
    return x.to(dtype)


def _dequant(x: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    if x.dtype == torch.float8_e4m3fn:
        return (x.float() * scale).to(dtype)
    return x.to(dtype)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` cached tokens of one sequence: [length, Hk, D]."""
    bs = cache.shape[1]
    nblocks = (length + bs - 1) // bs
    return cache[block_table[:nblocks].long()].reshape(-1, *cache.shape[2:])[:length]


def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
              scale: float, k_scale: float = 1.0, v_scale: float = 1.0,
              sliding_window: Optional[int] = None) -> torch.Tensor:
    if meta.is_decode and meta.context_lens_cpu is None:
        return _decode_attention(q, k_cache, v_cache, meta, scale, k_scale, v_scale,
                                 sliding_window)
    out = torch.empty_like(q)
    q_lens = meta.q_lens_cpu or (meta.cu_seqlens_q[1:] - meta.cu_seqlens_q[:-1]).tolist()
    ctx_lens = meta.context_lens_cpu or meta.context_lens.tolist()
    cdtype = torch.float32
    start = 0
    for i, (ql, cl) in enumerate(zip(q_lens, ctx_lens)):
        qi = q[start:start + ql].to(cdtype)  # [ql, Hq, D]
        ki = _dequant(gather_kv(k_cache, meta.block_tables[i], cl), k_scale, cdtype)
        vi = _dequant(gather_kv(v_cache, meta.block_tables[i], cl), v_scale, cdtype)
        rep = qi.shape[1] // ki.shape[1]
        ki = ki.repeat_interleave(rep, dim=1)
        vi = vi.repeat_interleave(rep, dim=1)
        qpos = torch.arange(cl - ql, cl, device=q.device).unsqueeze(1)
        kpos = torch.arange(cl, device=q.device).unsqueeze(0)
        mask = kpos <= qpos
        if sliding_window is not None:
            mask &= kpos > qpos - sliding_window
        o = F.scaled_dot_product_attention(qi.transpose(0, 1), ki.transpose(0, 1), vi.transpose(0, 1),
                                           attn_mask=mask, scale=scale)
        out[start:start + ql] = o.transpose(0, 1).to(q.dtype)
        start += ql
    return out


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      meta: AttentionMetadata, scale: float, k_scale: float, v_scale: float,
                      sliding_window: Optional[int]) -> torch.Tensor:
    """One query a sequence, its context length on the device only (a draft depth's, which
    follows drafts the host has not read): every sequence over max_context_len keys, the ones
    past its length masked, so no length is read back."""
    b, length, bs = meta.num_seqs, meta.max_context_len, k_cache.shape[1]
    tables = meta.block_tables[:, :-(-length // bs)].long().clamp(min=0)
    cdtype = torch.float32

    def keys(cache: torch.Tensor, kv_scale: float) -> torch.Tensor:
        kv = cache[tables].reshape(b, -1, *cache.shape[2:])[:, :length]  # [B, L, Hk, D]
        kv = _dequant(kv, kv_scale, cdtype)
        return kv.repeat_interleave(q.shape[1] // kv.shape[2], dim=2).transpose(1, 2)

    kpos = torch.arange(length, device=q.device).unsqueeze(0)
    qpos = meta.context_lens.long().unsqueeze(1) - 1
    mask = kpos <= qpos
    if sliding_window is not None:
        mask &= kpos > qpos - sliding_window
    o = F.scaled_dot_product_attention(q.to(cdtype).unsqueeze(2), keys(k_cache, k_scale),
                                       keys(v_cache, v_scale), attn_mask=mask[:, None, None, :],
                                       scale=scale)
    return o.squeeze(2).to(q.dtype)


def mla_rope_store(positions: torch.Tensor, q_pe: torch.Tensor, k_pe: torch.Tensor,
                   kv_c: torch.Tensor, latent_cache: torch.Tensor, slot_mapping: torch.Tensor,
                   kv_scale: float, cos_sin_cache: torch.Tensor, is_neox: bool) -> torch.Tensor:
    q_pe, k_pe = rotary(positions, q_pe, k_pe.unsqueeze(1), cos_sin_cache, is_neox)
    keep = slot_mapping >= 0
    flat = latent_cache.view(-1, latent_cache.shape[-1])
    latent = torch.cat([kv_c, k_pe.squeeze(1)], dim=-1)
    flat[slot_mapping[keep].long()] = _quant(latent[keep], latent_cache.dtype, kv_scale)
    return q_pe


def _causal_mask(q_len: int, ctx_len: int, device: torch.device) -> torch.Tensor:
    qpos = torch.arange(ctx_len - q_len, ctx_len, device=device).unsqueeze(1)
    return torch.arange(ctx_len, device=device).unsqueeze(0) <= qpos


def _mla_sequences(meta: AttentionMetadata, first_seq: int) -> list[tuple[int, int, int, int]]:
    """(sequence, first query row, q_len, ctx_len) of sequences first_seq.., rows from 0."""
    q_lens = meta.q_lens_cpu or (meta.cu_seqlens_q[1:] - meta.cu_seqlens_q[:-1]).tolist()
    ctx_lens = meta.context_lens_cpu or meta.context_lens.tolist()
    out, start = [], 0
    for i in range(first_seq, len(ctx_lens)):
        out.append((i, start, q_lens[i], ctx_lens[i]))
        start += q_lens[i]
    return out


def mla_prefill_attention(q: torch.Tensor, latent_cache: torch.Tensor, meta: AttentionMetadata,
                          kv_b_weight: torch.Tensor, qk_nope_head_dim: int, scale: float,
                          kv_scale: float, first_seq: int = 0) -> torch.Tensor:
    """The whole context of each sequence is up-projected at once: equal to attending over the
    cached prefix and the chunk apart and merging by log-sum-exp, which a tiled kernel does."""
    heads, n = q.shape[1], qk_nope_head_dim
    v_dim = kv_b_weight.shape[0] // heads - n
    lora = kv_b_weight.shape[1]
    out = q.new_empty(q.shape[0], heads, v_dim)
    for i, start, ql, cl in _mla_sequences(meta, first_seq):
        lat = _dequant(gather_kv(latent_cache, meta.block_tables[i], cl), kv_scale, torch.float32)
        kv = F.linear(lat[:, :lora].to(kv_b_weight.dtype), kv_b_weight).float()
        kv = kv.view(cl, heads, n + v_dim)
        k_pe = lat[:, lora:].unsqueeze(1).expand(cl, heads, lat.shape[1] - lora)
        k = torch.cat([kv[..., :n], k_pe], dim=-1)
        qi = q[start:start + ql].float()
        o = F.scaled_dot_product_attention(
            qi.transpose(0, 1), k.transpose(0, 1), kv[..., n:].transpose(0, 1),
            attn_mask=_causal_mask(ql, cl, q.device), scale=scale)
        out[start:start + ql] = o.transpose(0, 1).to(q.dtype)
    return out


def mla_decode_attention(q: torch.Tensor, latent_cache: torch.Tensor, meta: AttentionMetadata,
                         kv_lora_rank: int, scale: float, kv_scale: float) -> torch.Tensor:
    heads = q.shape[1]
    out = q.new_empty(q.shape[0], heads, kv_lora_rank)
    for i, start, ql, cl in _mla_sequences(meta, 0):
        lat = _dequant(gather_kv(latent_cache, meta.block_tables[i], cl), kv_scale, torch.float32)
        k = lat.unsqueeze(0).expand(heads, cl, lat.shape[1])
        v = lat[:, :kv_lora_rank].unsqueeze(0).expand(heads, cl, kv_lora_rank)
        o = F.scaled_dot_product_attention(q[start:start + ql].float().transpose(0, 1), k, v,
                                           attn_mask=_causal_mask(ql, cl, q.device), scale=scale)
        out[start:start + ql] = o.transpose(0, 1).to(q.dtype)
    return out


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
              experts: torch.Tensor, w13_scale: Optional[torch.Tensor] = None,
              w2_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The per-expert loop: each expert's tokens gathered into one matmul, weighted and summed
    in float32. Reads the per-expert counts back to the host, so it cannot be captured in a
    CUDA graph; it is the oracle and the CPU path. Pairs of expert id E (another rank's
    expert) sort last and are never visited. fp8 experts (codes with their scales) run as the
    fp8 GEMMs compute them: each hit expert dequantized, its input rounded to e4m3 as the
    kernels round it (fp8_reference.fp8_linear); kept as codes, dequantized per call."""
    out = torch.zeros_like(x, dtype=torch.float32)
    flat = experts.flatten()
    order = flat.argsort()
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()[:w13.shape[0]]
    token_of = order // experts.shape[1]
    w_sorted = weights.flatten()[order]
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        idx = token_of[start:start + c]
        h = silu_and_mul(_expert_linear(x[idx], w13[e], w13_scale, e))
        y = _expert_linear(h, w2[e], w2_scale, e)
        out.index_add_(0, idx, y.float() * w_sorted[start:start + c].unsqueeze(-1))
        start += c
    return out.to(x.dtype)


def _expert_linear(x: torch.Tensor, w: torch.Tensor, scales: Optional[torch.Tensor],
                   e: int) -> torch.Tensor:
    if scales is None:
        return F.linear(x, w)
    return fp8_linear(x, expert_weight(w, scales[e]))


class TorchBackend:
    name = "torch"

    def rms_norm(self, x, weight, eps):
        return rms_norm(x, weight, eps)

    def fused_add_rms_norm(self, x, residual, weight, eps):
        s = x + residual
        return rms_norm(s, weight, eps), s

    def rotary(self, positions, q, k, cos_sin_cache, is_neox):
        return rotary(positions, q, k, cos_sin_cache, is_neox)

    def silu_and_mul(self, x):
        return silu_and_mul(x)

    def linear(self, x, weight, bias=None):
        if isinstance(weight, torch.Tensor):
            return F.linear(x, weight, bias)
        return weight(x, bias)  # EmulatedFp8Linear

    def block_output_linear(self, x, weight, bias=None):
        return self.linear(x, weight, bias)

    def prepare_weight(self, qw):
        """fp8 weights run as an fp8 GEMM computes (fp8_reference.py); other quantized weights
        run dequantized: the oracle is the float weight."""
        return EmulatedFp8Linear.of(qw) if isinstance(qw, Fp8Weight) else None

    def weights_prepared(self):
        pass

    def silu_and_mul_linear(self, x, weight, bias=None):
        return self.linear(silu_and_mul(x), weight, bias)

    def add_rms_norm_linear(self, x, residual, norm_weight, eps, weight, bias=None):
        return add_rms_norm_linear_unfused(self, x, residual, norm_weight, eps, weight, bias)

    def fused_moe(self, x, w13, w2, weights, experts, w13_scale=None, w2_scale=None):
        return fused_moe(x, w13, w2, weights, experts, w13_scale, w2_scale)

    def store_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale):
        store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)

    def rope_store_kv(self, positions, q, k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale,
                      cos_sin_cache, is_neox, q_norm_weight=None, k_norm_weight=None,
                      norm_eps=0.0):
        return rope_store_kv_unfused(self, positions, q, k, v, k_cache, v_cache, slot_mapping,
                                     k_scale, v_scale, cos_sin_cache, is_neox, q_norm_weight,
                                     k_norm_weight, norm_eps)

    def attention(self, q, k_cache, v_cache, meta, scale, k_scale, v_scale, sliding_window=None):
        return attention(q, k_cache, v_cache, meta, scale, k_scale, v_scale, sliding_window)

    def mla_rope_store(self, positions, q_pe, k_pe, kv_c, latent_cache, slot_mapping, kv_scale,
                       cos_sin_cache, is_neox):
        return mla_rope_store(positions, q_pe, k_pe, kv_c, latent_cache, slot_mapping, kv_scale,
                              cos_sin_cache, is_neox)

    def mla_prefill_attention(self, q, latent_cache, meta, kv_b_weight, qk_nope_head_dim, scale,
                              kv_scale, first_seq=0):
        return mla_prefill_attention(q, latent_cache, meta, kv_b_weight, qk_nope_head_dim, scale,
                                     kv_scale, first_seq)

    def mla_decode_attention(self, q, latent_cache, meta, kv_lora_rank, scale, kv_scale):
        return mla_decode_attention(q, latent_cache, meta, kv_lora_rank, scale, kv_scale)
