"""MLA prefill attention, up-projected: every cached latent of the batch's prefill sequences
(the chunk's own and its cached prefix) goes through kv_b_proj into per-head keys (N nope dims,
plus the R rope dims every head shares) and values (V dims), and the chunk's queries attend
causally over them. R1: keys 128 + 64, values 128.

The keys are taken in passes over a window of positions [k0, k0 + window) of every sequence,
so the up-projected keys and values (H × (N + V) × 2 bytes a token: 64 KB for R1 at tp1) never
outgrow WORKSPACE_BYTES however long the cached prefixes are. Each pass: a gather copies the
window's latents out of the paged cache into one contiguous run per sequence (dequantising an
fp8 cache), one GEMM through kv_b_proj up-projects them all, and a varlen flash-attention
kernel attends the chunk's queries causally over them; its scores are two dots (nope part
against the up-projected keys, rope part against the shared latent rope key, never broadcast
per head) and its values have their own width. A later pass merges its partial result into the
earlier ones by log-sum-exp, in place (each program owns its rows and head in every pass).

Prefill steps are never captured in a CUDA graph, so the metadata's host lengths size the
passes and buffers.
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
@triton.jit(do_not_specialize=["bt_stride", "first_seq", "k0"])
def _gather_latents_kernel(c_ptr, out_ptr, ctx_ptr, cu_ctx_ptr, bt_ptr, c_blk_stride,
                           c_tok_stride, bt_stride, first_seq, k0, kv_scale, W: tl.constexpr,
                           PAGE: tl.constexpr, BLOCK: tl.constexpr, CHUNK: tl.constexpr,
                           DEQUANT: tl.constexpr):
    """Positions k0 + i of sequence first_seq + s, i < its run length in cu_ctx, to that run."""
    s = tl.program_id(1)
    seq = first_seq + s
    run = tl.load(cu_ctx_ptr + s)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i_mask = i < tl.load(cu_ctx_ptr + s + 1) - run
    n = k0 + i
    blk = tl.load(bt_ptr + seq.to(tl.int64) * bt_stride + n // PAGE, mask=i_mask, other=0)
    src = blk.to(tl.int64) * c_blk_stride + (n % PAGE) * c_tok_stride
    dst = (run + i).to(tl.int64) * W
    col = tl.arange(0, CHUNK)
    for c in tl.static_range(0, W, CHUNK):
        x = tl.load(c_ptr + src[:, None] + c + col[None, :], mask=i_mask[:, None], other=0.0)
        if DEQUANT:
            x = x.to(tl.float32) * kv_scale
        tl.store(out_ptr + dst[:, None] + c + col[None, :], x.to(out_ptr.dtype.element_ty),
                 mask=i_mask[:, None])


@triton.jit
def _merge_into(o_ptr, lse_ptr, o_row, lse_off, acc, m_i, l_i, out_mask, row_mask, dv):
    """Fold this pass's softmax state into the running (o, lse) of earlier passes (base 2)."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
    prev_lse = tl.load(lse_ptr + lse_off, mask=row_mask, other=float("-inf"))
    prev = tl.load(o_row + dv[None, :], mask=out_mask, other=0.0)
    m = tl.maximum(prev_lse, lse)
    m = tl.where(m == float("-inf"), 0.0, m)
    w_prev, w_new = tl.exp2(prev_lse - m), tl.exp2(lse - m)
    total = w_prev + w_new
    total_safe = tl.where(total == 0.0, 1.0, total)
    merged = (prev * w_prev[:, None] + acc / l_safe[:, None] * w_new[:, None]) / total_safe[:, None]
    tl.store(o_row + dv[None, :], merged, mask=out_mask)
    tl.store(lse_ptr + lse_off, tl.where(total == 0.0, float("-inf"), m + tl.log2(total_safe)),
             mask=row_mask)


@triton.jit(do_not_specialize=["first_seq", "k0"])
def _mla_prefill_kernel(q_ptr, kv_ptr, lat_ptr, o_ptr, lse_ptr, cu_q_ptr, ctx_ptr, cu_ctx_ptr,
                        q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                        kv_tok_stride, lat_tok_stride, n_heads, qk_scale, first_seq, k0,
                        N: tl.constexpr, R: tl.constexpr, V: tl.constexpr, L: tl.constexpr,
                        NOPE: tl.constexpr, ROPE: tl.constexpr, V_DIM: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MERGE: tl.constexpr,
                        DOT: tl.constexpr, PREC: tl.constexpr):
    mblk = tl.program_id(0)
    s = tl.program_id(1)
    head = tl.program_id(2)
    seq = first_seq + s
    q_start = tl.load(cu_q_ptr + seq) - tl.load(cu_q_ptr + first_seq)  # q's rows start at 0
    q_len = tl.load(cu_q_ptr + seq + 1) - tl.load(cu_q_ptr + seq)
    if mblk * BLOCK_M < q_len:
        ctx = tl.load(ctx_ptr + seq)
        k_start = tl.load(cu_ctx_ptr + s)
        k_len = tl.load(cu_ctx_ptr + s + 1) - k_start  # this pass's keys: positions k0 + i
        prefix = ctx - q_len
        m_offs = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
        m_mask = m_offs < q_len
        q_pos = prefix + m_offs
        rows_q = (q_start + m_offs).to(tl.int64)
        q_row = q_ptr + rows_q[:, None] * q_tok_stride + head * q_head_stride
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
        hi = tl.minimum(k_len, prefix + (mblk + 1) * BLOCK_M - k0)
        head_off = head * (N + V)
        for start in range(0, hi, BLOCK_N):
            i = start + tl.arange(0, BLOCK_N)
            i_mask = i < hi
            rows = (k_start + i).to(tl.int64)
            kv_row = kv_ptr + rows[:, None] * kv_tok_stride + head_off
            k_nope = tl.load(kv_row + dn[None, :], mask=i_mask[:, None] & (dn < N)[None, :],
                             other=0.0)
            k_pe = tl.load(lat_ptr + rows[:, None] * lat_tok_stride + L + de[None, :],
                           mask=i_mask[:, None] & (de < R)[None, :], other=0.0)
            qk = tl.dot(q_nope, tl.trans(k_nope.to(DOT)), input_precision=PREC)
            qk = tl.dot(q_pe, tl.trans(k_pe.to(DOT)), qk, input_precision=PREC) * qk_scale
            qk = tl.where((k0 + i[None, :] <= q_pos[:, None]) & i_mask[None, :], qk,
                          float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(qk - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(kv_row + N + dv[None, :], mask=i_mask[:, None] & (dv < V)[None, :],
                        other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PREC)
            m_i = m_new
        o_row = o_ptr + rows_q[:, None] * o_tok_stride + head * o_head_stride
        out_mask = m_mask[:, None] & (dv < V)[None, :]
        if MERGE:
            if hi > 0:  # else every key of the pass lies past these queries: nothing to fold in
                _merge_into(o_ptr, lse_ptr, o_row, rows_q * n_heads + head, acc, m_i, l_i,
                            out_mask, m_mask, dv)
        else:
            l_safe = tl.where(l_i == 0.0, 1.0, l_i)
            tl.store(o_row + dv[None, :], (acc / l_safe[:, None]).to(o_ptr.dtype.element_ty),
                     mask=out_mask)


# The up-projected keys and values of one pass, at most (R1 tp1: 4,096 tokens' worth).
WORKSPACE_BYTES = 256 << 20


def _pad(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def key_window(ctx: list[int], bytes_per_token: int, workspace_bytes: int = WORKSPACE_BYTES) -> int:
    """Positions per sequence in one pass: the whole longest context when every context fits
    the workspace at once, else a multiple of 64 with the window of every sequence inside it."""
    if sum(ctx) * bytes_per_token <= workspace_bytes:
        return max(max(ctx), 1)
    return max(64, workspace_bytes // (bytes_per_token * len(ctx)) // 64 * 64)


def gather_latents(latent_cache: torch.Tensor, meta: AttentionMetadata, first_seq: int,
                   kv_scale: float, dtype: torch.dtype, k0: int, window: int,
                   ctx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(latents [Σ run, L + R] in `dtype`, cu_ctx [n + 1] int32): positions [k0, k0 + window)
    of sequences first_seq.. (host lengths `ctx`; an fp8 cache dequantised), each sequence's
    run from its cu_ctx offset."""
    n_seqs, width = len(ctx), latent_cache.shape[-1]
    runs = (meta.context_lens[first_seq:] - k0).clamp(0, window)
    cu_ctx = F.pad(torch.cumsum(runs, 0, dtype=torch.int32), (1, 0))
    total = sum(min(max(c - k0, 0), window) for c in ctx)
    out = torch.empty(total, width, dtype=dtype, device=latent_cache.device)
    if total == 0:
        return out, cu_ctx
    block = 32
    longest = min(max(ctx) - k0, window)
    _gather_latents_kernel[(triton.cdiv(longest, block), n_seqs)](
        latent_cache, out, meta.context_lens, cu_ctx, meta.block_tables, latent_cache.stride(0),
        latent_cache.stride(1), meta.block_tables.stride(0), first_seq, k0, float(kv_scale),
        W=width, PAGE=latent_cache.shape[1], BLOCK=block, CHUNK=min(128, width & -width),
        DEQUANT=latent_cache.dtype == torch.float8_e4m3fn, num_warps=4)
    return out, cu_ctx


def mla_prefill_attention(q: torch.Tensor, latent_cache: torch.Tensor, meta: AttentionMetadata,
                          kv_b_weight: torch.Tensor, qk_nope_head_dim: int, scale: float,
                          kv_scale: float, first_seq: int = 0,
                          linear: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.linear,
                          workspace_bytes: int = WORKSPACE_BYTES) -> torch.Tensor:
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
    ctx = meta.context_lens_cpu[first_seq:] if meta.context_lens_cpu else \
        meta.context_lens[first_seq:].tolist()
    per_token = (heads * (nope + v_dim) + lora + rope) * q.element_size()
    window = key_window(ctx, per_token, workspace_bytes)
    passes = triton.cdiv(max(ctx), window)
    merge = passes > 1
    if merge:  # fp32 running results, in the kernel's base-2 log-sum-exp
        acc = torch.zeros(n_tok, heads, v_dim, dtype=torch.float32, device=q.device)
        lse = torch.full((n_tok, heads), float("-inf"), dtype=torch.float32, device=q.device)
    else:
        acc, lse = out, out
    max_q = meta.max_q_len
    # sm_90 compile: 64 × 64 tiles at R1's widths spill ~400 bytes a thread at 4 warps, none at 8.
    block_m = 64 if max_q > 32 else 16
    grid = (triton.cdiv(max_q, block_m), meta.num_seqs - first_seq, heads)
    for k0 in range(0, passes * window, window):
        latents, cu_ctx = gather_latents(latent_cache, meta, first_seq, kv_scale, q.dtype, k0,
                                         window, ctx)
        kv = linear(latents[:, :lora], kv_b_weight)  # [Σ run, H * (N + V)]
        _mla_prefill_kernel[grid](
            q, kv, latents, acc, lse, meta.cu_seqlens_q, meta.context_lens, cu_ctx,
            q.stride(0), q.stride(1), acc.stride(0), acc.stride(1), kv.stride(0),
            latents.stride(0), heads, scale * LOG2E, first_seq, k0, N=nope, R=rope, V=v_dim,
            L=lora, NOPE=_pad(nope), ROPE=_pad(rope), V_DIM=_pad(v_dim), BLOCK_M=block_m,
            BLOCK_N=64, MERGE=merge, DOT=dot_dtype(q.dtype), PREC=dot_precision(q.dtype),
            num_warps=8 if block_m == 64 else 4, num_stages=2)
    if merge:
        out.copy_(acc)
    return out
