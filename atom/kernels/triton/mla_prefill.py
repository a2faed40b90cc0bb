"""MLA prefill attention, up-projected: every cached latent of the batch's prefill sequences
(the chunk's own and its cached prefix) goes through kv_b_proj into per-head keys (N nope dims,
plus the R rope dims every head shares) and values (V dims), and the chunk's queries attend
causally over them. R1: keys 128 + 64, values 128.

Three steps: a gather that copies each sequence's latents out of the paged cache into one
contiguous run per sequence (dequantising an fp8 cache), one GEMM through kv_b_proj for all of
them, and a varlen flash-attention kernel whose scores are two dots (nope part against the
up-projected keys, rope part against the shared latent rope key, never broadcast per head)
and whose values have their own width. Attending over the whole context at once equals the
chunked form merged by log-sum-exp (what the kernel's online softmax does over its key tiles).

Prefill steps are never captured in a CUDA graph, so the host lengths of the metadata size the
buffers. The up-projected context costs H × (N + V) × 2 bytes a token (64 KB for R1 at tp1).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision

LOG2E = 1.4426950408889634


# Widths are constexprs (one value per model): a mask against a runtime width kept Triton from
# vectorising the loads (2-byte scalar loads in the sm_90 PTX). The gather walks the latent in
# CHUNK-wide columns that divide it (64 for R1's 576), so no column needs a mask.
@triton.jit(do_not_specialize=["bt_stride", "first_seq"])
def _gather_latents_kernel(c_ptr, out_ptr, ctx_ptr, cu_ctx_ptr, bt_ptr, c_blk_stride,
                           c_tok_stride, bt_stride, first_seq, kv_scale, W: tl.constexpr,
                           PAGE: tl.constexpr, BLOCK: tl.constexpr, CHUNK: tl.constexpr,
                           DEQUANT: tl.constexpr):
    s = tl.program_id(1)
    seq = first_seq + s
    ctx = tl.load(ctx_ptr + seq)
    n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    n_mask = n < ctx
    blk = tl.load(bt_ptr + seq.to(tl.int64) * bt_stride + n // PAGE, mask=n_mask, other=0)
    src = blk.to(tl.int64) * c_blk_stride + (n % PAGE) * c_tok_stride
    dst = (tl.load(cu_ctx_ptr + s) + n).to(tl.int64) * W
    col = tl.arange(0, CHUNK)
    for c in tl.static_range(0, W, CHUNK):
        x = tl.load(c_ptr + src[:, None] + c + col[None, :], mask=n_mask[:, None], other=0.0)
        if DEQUANT:
            x = x.to(tl.float32) * kv_scale
        tl.store(out_ptr + dst[:, None] + c + col[None, :], x.to(out_ptr.dtype.element_ty),
                 mask=n_mask[:, None])


@triton.jit(do_not_specialize=["first_seq"])
def _mla_prefill_kernel(q_ptr, kv_ptr, lat_ptr, o_ptr, cu_q_ptr, ctx_ptr, cu_ctx_ptr,
                        q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                        kv_tok_stride, lat_tok_stride, qk_scale, first_seq, N: tl.constexpr,
                        R: tl.constexpr, V: tl.constexpr, L: tl.constexpr, NOPE: tl.constexpr,
                        ROPE: tl.constexpr, V_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr):
    mblk = tl.program_id(0)
    s = tl.program_id(1)
    head = tl.program_id(2)
    seq = first_seq + s
    q_start = tl.load(cu_q_ptr + seq) - tl.load(cu_q_ptr + first_seq)  # q's rows start at 0
    q_len = tl.load(cu_q_ptr + seq + 1) - tl.load(cu_q_ptr + seq)
    if mblk * BLOCK_M < q_len:
        ctx = tl.load(ctx_ptr + seq)
        k_start = tl.load(cu_ctx_ptr + s)
        prefix = ctx - q_len
        m_offs = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
        m_mask = m_offs < q_len
        q_pos = prefix + m_offs
        rows_q = (q_start + m_offs).to(tl.int64)[:, None]
        q_row = q_ptr + rows_q * q_tok_stride + head * q_head_stride
        dn = tl.arange(0, NOPE)
        de = tl.arange(0, ROPE)
        dv = tl.arange(0, V_DIM)
        q_nope = tl.load(q_row + dn[None, :], mask=m_mask[:, None] & (dn < N)[None, :],
                         other=0.0).to(DOT)
        q_pe = tl.load(q_row + N + de[None, :], mask=m_mask[:, None] & (de < R)[None, :],
                       other=0.0).to(DOT)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, V_DIM], tl.float32)
        hi = tl.minimum(ctx, prefix + (mblk + 1) * BLOCK_M)
        head_off = head * (N + V)
        for start in range(0, hi, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            n_mask = n < hi
            rows = (k_start + n).to(tl.int64)
            kv_row = kv_ptr + rows[:, None] * kv_tok_stride + head_off
            k_nope = tl.load(kv_row + dn[None, :], mask=n_mask[:, None] & (dn < N)[None, :],
                             other=0.0)
            k_pe = tl.load(lat_ptr + rows[:, None] * lat_tok_stride + L + de[None, :],
                           mask=n_mask[:, None] & (de < R)[None, :], other=0.0)
            qk = tl.dot(q_nope, tl.trans(k_nope.to(DOT)), input_precision=PREC)
            qk = tl.dot(q_pe, tl.trans(k_pe.to(DOT)), qk, input_precision=PREC) * qk_scale
            qk = tl.where((n[None, :] <= q_pos[:, None]) & n_mask[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(qk - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(kv_row + N + dv[None, :], mask=n_mask[:, None] & (dv < V)[None, :],
                        other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PREC)
            m_i = m_new
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o_row = o_ptr + rows_q * o_tok_stride + head * o_head_stride
        tl.store(o_row + dv[None, :], (acc / l_safe[:, None]).to(o_ptr.dtype.element_ty),
                 mask=m_mask[:, None] & (dv < V)[None, :])


def _pad(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def gather_latents(latent_cache: torch.Tensor, meta: AttentionMetadata, first_seq: int,
                   kv_scale: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(latents [Σ ctx, L + R] in `dtype`, cu_ctx [n + 1] int32): the cached latents of
    sequences first_seq.. (an fp8 cache dequantised), each one's run from its cu_ctx offset."""
    ctx = meta.context_lens_cpu[first_seq:] if meta.context_lens_cpu else \
        meta.context_lens[first_seq:].tolist()
    n_seqs, width = len(ctx), latent_cache.shape[-1]
    cu_ctx = F.pad(torch.cumsum(meta.context_lens[first_seq:], 0, dtype=torch.int32), (1, 0))
    out = torch.empty(sum(ctx), width, dtype=dtype, device=latent_cache.device)
    if out.shape[0] == 0:
        return out, cu_ctx
    block = 32
    _gather_latents_kernel[(triton.cdiv(max(ctx), block), n_seqs)](
        latent_cache, out, meta.context_lens, cu_ctx, meta.block_tables, latent_cache.stride(0),
        latent_cache.stride(1), meta.block_tables.stride(0), first_seq, float(kv_scale), W=width,
        PAGE=latent_cache.shape[1], BLOCK=block, CHUNK=min(128, width & -width),
        DEQUANT=latent_cache.dtype == torch.float8_e4m3fn, num_warps=4)
    return out, cu_ctx


def mla_prefill_attention(q: torch.Tensor, latent_cache: torch.Tensor, meta: AttentionMetadata,
                          kv_b_weight: torch.Tensor, qk_nope_head_dim: int, scale: float,
                          kv_scale: float, first_seq: int = 0,
                          linear: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.linear
                          ) -> torch.Tensor:
    """q [T, H, N + R] (sequences first_seq.. of meta, rows from 0, their tokens already stored);
    kv_b_weight [H * (N + V), L] → [T, H, V]. `linear` runs the up-projection GEMM (the
    backend's, so its BLAS choice applies)."""
    n_tok, heads, qk_dim = q.shape
    nope, rope = qk_nope_head_dim, qk_dim - qk_nope_head_dim
    v_dim = kv_b_weight.shape[0] // heads - nope
    lora = kv_b_weight.shape[1]
    out = q.new_empty(n_tok, heads, v_dim)
    if n_tok == 0 or meta.num_seqs == first_seq:
        return out
    latents, cu_ctx = gather_latents(latent_cache, meta, first_seq, kv_scale, q.dtype)
    kv = linear(latents[:, :lora], kv_b_weight)  # [Σ ctx, H * (N + V)]
    max_q = meta.max_q_len
    # sm_90 compile: 64 × 64 tiles at R1's widths spill ~400 bytes a thread at 4 warps, none at 8.
    block_m = 64 if max_q > 32 else 16
    grid = (triton.cdiv(max_q, block_m), meta.num_seqs - first_seq, heads)
    _mla_prefill_kernel[grid](
        q, kv, latents, out, meta.cu_seqlens_q, meta.context_lens, cu_ctx,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), kv.stride(0), latents.stride(0),
        scale * LOG2E, first_seq, N=nope, R=rope, V=v_dim, L=lora, NOPE=_pad(nope),
        ROPE=_pad(rope), V_DIM=_pad(v_dim), BLOCK_M=block_m, BLOCK_N=64,
        DOT=dot_dtype(q.dtype), PREC=dot_precision(q.dtype), num_warps=8 if block_m == 64 else 4,
        num_stages=2)
    return out
