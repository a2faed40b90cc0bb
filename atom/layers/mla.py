"""Multi-head latent attention (DeepSeek-V2/V3) over a paged latent cache.

Per token the cache keeps one vector: the normed compressed KV (kv_lora_rank, 512 in R1) and the
rotated key shared by all heads (qk_rope_head_dim, 64): 1,152 bytes in bf16, where full attention
over R1's 128 heads (192-dim keys, 128-dim values) would keep 81,920. Two ways to attend over it
give the same result:
- up-projected (prefill, chunked prefill): kv_b_proj turns every cached latent into per-head keys
  (128 nope + 64 rope = 192 dims) and values (128): the cheaper way when many queries share each
  key;
- absorbed (decode): W_UK folds into the query (q_nope @ W_UK: 512 dims per head) and W_UV into
  the output, so the queries attend over the latents themselves as one shared KV head (MQA) and
  nothing is up-projected per cached token.

The layer owns the absorbed weights (made once after loading, `absorb`) and reads its cache and
this step's metadata from its model's forward slot, like PagedAttention.
"""
from __future__ import annotations

import torch
from torch import nn

from atom.kernels.metadata import AttentionMetadata
from atom.layers.kv_spec import MLASpec
from atom.layers.model_context import ModelContext


class MLAAttention(nn.Module):
    def __init__(self, mc: ModelContext, num_heads: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, kv_lora_rank: int, scale: float,
                 layer_idx: int) -> None:
        super().__init__()
        self.backend, self.slot = mc.backend, mc.forward
        self.num_heads, self.nope, self.rope = num_heads, qk_nope_head_dim, qk_rope_head_dim
        self.v_head_dim, self.kv_lora_rank = v_head_dim, kv_lora_rank
        self.scale, self.layer_idx = scale, layer_idx
        # q_nope [H, T, N] @ w_uk [H, N, L] → the query in latent space; out [H, T, L] @ w_uv
        # [H, L, V] → per-head values. Contiguous copies of kv_b_proj's weight, made by absorb.
        self.register_buffer("w_uk", torch.empty(num_heads, qk_nope_head_dim, kv_lora_rank),
                             persistent=False)
        self.register_buffer("w_uv", torch.empty(num_heads, kv_lora_rank, v_head_dim),
                             persistent=False)

    def kv_spec(self, dtype: torch.dtype) -> MLASpec:
        return MLASpec(self.kv_lora_rank + self.rope, dtype)

    @torch.no_grad()
    def absorb(self, kv_b_weight: torch.Tensor) -> None:
        """kv_b_weight: [H * (N + V), L], each head's nope-key rows then its value rows."""
        w = kv_b_weight.view(self.num_heads, self.nope + self.v_head_dim, self.kv_lora_rank)
        self.w_uk.copy_(w[:, :self.nope])
        self.w_uv.copy_(w[:, self.nope:].transpose(1, 2))

    def forward(self, q: torch.Tensor, kv_c: torch.Tensor, k_pe: torch.Tensor,
                positions: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool,
                kv_b_weight: torch.Tensor) -> torch.Tensor:
        """q: [T, H, N + R] before rotary; kv_c: [T, L] normed; k_pe: [T, R] before rotary;
        kv_b_weight: kv_b_proj's [H * (N + V), L]. → [T, H * V].

        The batch's leading sequences of at most ABSORBED_MAX_Q queries (decodes and
        speculative verifies; all of an all-decode batch) take the absorbed path, the rest the
        up-projected one."""
        ctx = self.slot.current()
        (latent_cache,) = ctx.kv_caches[self.layer_idx]
        kv_scale = ctx.kv_scales[self.layer_idx][0]
        meta, be = ctx.meta, self.backend
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        q_pe = be.mla_rope_store(positions, q_pe, k_pe, kv_c, latent_cache, meta.slot_mapping,
                                 kv_scale, cos_sin_cache, is_neox)
        n_dec, t_dec, head = absorbed_head(meta, q.shape[0])
        parts = []
        if n_dec:
            parts.append(self.absorbed(q_nope[:t_dec], q_pe[:t_dec], latent_cache, head, kv_scale))
        if n_dec < meta.num_seqs:
            rest = torch.cat([q_nope[t_dec:], q_pe[t_dec:]], dim=-1)
            parts.append(be.mla_prefill_attention(rest, latent_cache, meta, kv_b_weight, self.nope,
                                                  self.scale, kv_scale, first_seq=n_dec))
        out = parts[0] if len(parts) == 1 else torch.cat(parts)
        return out.reshape(q.shape[0], self.num_heads * self.v_head_dim)

    def absorbed(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent_cache: torch.Tensor,
                 meta: AttentionMetadata, kv_scale: float) -> torch.Tensor:
        """Attention of every sequence in meta (any q_len) through the absorbed weights:
        q_nope [T, H, N], q_pe [T, H, R] rotated → [T, H, V]."""
        q_lat = torch.bmm(q_nope.transpose(0, 1), self.w_uk).transpose(0, 1)
        q_mqa = torch.cat([q_lat, q_pe], dim=-1)
        out_lat = self.backend.mla_decode_attention(q_mqa, latent_cache, meta, self.kv_lora_rank,
                                                 self.scale, kv_scale)
        return torch.bmm(out_lat.transpose(0, 1), self.w_uv).transpose(0, 1)


# Absorbed attention costs a query 2 × (L + R + L) multiply-adds per head and cached token; the
# up-projection costs every cached token 2 × L × (N + V) per head (R1: 2,176 against 262,144),
# so the absorbed path is cheaper up to ~100 queries a sequence. Capped at 8 (k + 1 verify
# queries), where the decode kernel still puts 8 heads in a program.
ABSORBED_MAX_Q = 8


def absorbed_head(meta: AttentionMetadata, n_tok: int) -> tuple[int, int, AttentionMetadata]:
    """(n, their query rows, metadata of the batch's first n sequences as views from offset 0):
    the leading run of sequences with at most ABSORBED_MAX_Q queries. Without host lengths (a
    decode CUDA graph's batch has none, and is all decodes) the one-query run the metadata
    names."""
    if meta.is_decode:
        return meta.num_seqs, n_tok, meta
    q_lens = meta.q_lens_cpu
    if q_lens is None:
        n = meta.num_decode_seqs
        return n, n, meta.decode_head()
    n = next((i for i, q in enumerate(q_lens) if q > ABSORBED_MAX_Q), len(q_lens))
    if n == len(q_lens):
        return n, n_tok, meta
    rows, ctx = sum(q_lens[:n]), meta.context_lens_cpu
    max_q = max(q_lens[:n], default=1)
    return n, rows, AttentionMetadata(
        meta.cu_seqlens_q[:n + 1], meta.context_lens[:n], meta.block_tables[:n],
        meta.slot_mapping[:rows], max_q, meta.max_context_len, max_q == 1, q_lens[:n],
        ctx[:n] if ctx else None)
