"""Attention of a few queries per sequence (a speculative verify: 1 + k) over the paged KV
cache, split-KV as the decode kernel.

The decode kernel (paged_decode_attention.py) takes one query a sequence. The prefill kernel
takes any number, but its programs are (query tile, q head): each reads its KV head once per q
head that shares it (GROUP times the bytes: 4x on Llama-3-8B), and at batch 1 there are only Hq
of them over the whole context, where the decode kernel has Hk x 32 splits. Here one program
owns (sequence, kv head, split) and its rows are (query, head of the group) pairs, so each K/V
byte is read once for every query and head that use it; queries are causal among themselves
(query j of q_len sits at ctx − q_len + j). Sequences of fewer queries (an n-gram row with fewer
drafts) mask their rows. The partials are merged per token in a second small launch (the decode
kernel's merge). The split count depends only on the batch shape and every length is read on
the device, so a captured CUDA graph replays for any contexts.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision
from atom.kernels.triton.paged_decode_attention import (LOG2E, MAX_SPLITS, _merge_splits,
                                                        num_splits)
from atom.kernels.triton.paged_kv import paged_kv_offsets

# Queries a sequence this kernel takes: a verify of up to 7 drafts (rows = queries x the
# group's heads stay within one tile: 8 x 4 on Llama-3-8B); longer chunks are prefill's.
MAX_QUERIES = 8


@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _multi_query_kernel(q_ptr, kc_ptr, vc_ptr, o_ptr, mid_o_ptr, mid_lse_ptr, cu_q_ptr, ctx_ptr,
                        bt_ptr, q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                        c_blk_stride, c_tok_stride, c_head_stride, bt_stride,
                        qk_scale, v_scale, window, head_dim, n_q_heads, n_splits,
                        GROUP: tl.constexpr, G_PAD: tl.constexpr, Q_PAD: tl.constexpr,
                        ROWS: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, SPLIT: tl.constexpr, HAS_WINDOW: tl.constexpr,
                        DOT: tl.constexpr, PREC: tl.constexpr):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    ctx = tl.load(ctx_ptr + seq)
    r = tl.arange(0, ROWS)
    qi = r // G_PAD
    g = r % G_PAD
    r_mask = (r < Q_PAD * G_PAD) & (qi < q_len) & (g < GROUP)
    heads = kvh * GROUP + g
    q_pos = ctx - q_len + qi
    tok = (q_start + qi).to(tl.int64)
    d = tl.arange(0, HEAD_DIM)
    d_mask = d < head_dim
    q = tl.load(q_ptr + tok[:, None] * q_tok_stride + heads[:, None] * q_head_stride + d[None, :],
                mask=r_mask[:, None] & d_mask[None, :], other=0.0).to(DOT)
    lo0 = 0
    if HAS_WINDOW:
        lo0 = tl.maximum(ctx - q_len + 1 - window, 0)  # the first query's window
    per_split = tl.cdiv(tl.cdiv(ctx - lo0, n_splits), BLOCK_N) * BLOCK_N
    lo = lo0 + split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * bt_stride
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        kv_off = paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride,
                                  c_head_stride, PAGE)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(kc_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PREC) * qk_scale
        keep = (n[None, :] <= q_pos[:, None]) & n_mask[None, :]
        if HAS_WINDOW:
            keep = keep & (n[None, :] > q_pos[:, None] - window)
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(qk - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(vc_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    row_mask = r_mask[:, None] & d_mask[None, :]
    if not SPLIT:
        tl.store(o_ptr + tok[:, None] * o_tok_stride + heads[:, None] * o_head_stride + d[None, :],
                 (out * v_scale).to(o_ptr.dtype.element_ty), mask=row_mask)
    else:
        # mid layout: [T, Hq, n_splits, HEAD_DIM] and [T, Hq, n_splits]; every split writes
        # every row (an empty range as lse -inf), so the merge reads no stale partial.
        mid_row = (tok * n_q_heads + heads) * n_splits + split
        tl.store(mid_o_ptr + mid_row[:, None] * HEAD_DIM + d[None, :], out, mask=row_mask)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)


@triton.jit
def _multi_query_merge_kernel(mid_o_ptr, mid_lse_ptr, o_ptr, o_tok_stride, o_head_stride,
                              n_q_heads, head_dim, v_scale, n_splits, GROUP: tl.constexpr,
                              SPLIT_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """One (token, kv head): the GROUP heads' partials merged."""
    tok = tl.program_id(0).to(tl.int64)
    _merge_splits(mid_o_ptr, mid_lse_ptr, o_ptr, tok, tl.program_id(1) * GROUP, o_tok_stride,
                  o_head_stride, n_q_heads, head_dim, v_scale, n_splits, GROUP, SPLIT_PAD,
                  HEAD_DIM)


def takes(meta: AttentionMetadata) -> bool:
    """A batch this kernel serves whole: several queries in some sequence, none longer than
    MAX_QUERIES (one-query sequences beside them too: a verify step's rows without drafts, so a
    CUDA graph of the step runs the kernels the eager step runs)."""
    return not meta.is_decode and meta.max_q_len <= MAX_QUERIES


def multi_query_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          meta: AttentionMetadata, scale: float, k_scale: float = 1.0,
                          v_scale: float = 1.0, sliding_window: int | None = None,
                          splits: int | None = None) -> torch.Tensor:
    """q: [T, Hq, D] (every sequence of meta, at most MAX_QUERIES queries each, their k/v
    already stored) → [T, Hq, D]."""
    n_tok, n_q_heads, head_dim = q.shape
    out = torch.empty_like(q)
    batch = meta.num_seqs
    if n_tok == 0 or batch == 0:
        return out
    n_kv_heads = k_cache.shape[2]
    group = n_q_heads // n_kv_heads
    g_pad, q_pad = triton.next_power_of_2(group), triton.next_power_of_2(meta.max_q_len)
    head_pad = triton.next_power_of_2(head_dim)
    n_split = splits or num_splits(batch, n_kv_heads, q.device)
    if n_split > 1:
        f32 = dict(dtype=torch.float32, device=q.device)
        mid_o = torch.empty((n_tok, n_q_heads, n_split, head_pad), **f32)
        mid_lse = torch.empty((n_tok, n_q_heads, n_split), **f32)
    else:
        mid_o = mid_lse = out
    _multi_query_kernel[(batch, n_kv_heads, n_split)](
        q, k_cache, v_cache, out, mid_o, mid_lse, meta.cu_seqlens_q, meta.context_lens,
        meta.block_tables, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), meta.block_tables.stride(0),
        scale * k_scale * LOG2E, float(v_scale), int(sliding_window or 0), head_dim, n_q_heads,
        n_split, GROUP=group, G_PAD=g_pad, Q_PAD=q_pad, ROWS=max(16, q_pad * g_pad),
        PAGE=k_cache.shape[1], BLOCK_N=32 if head_pad > 128 else 64, HEAD_DIM=head_pad,
        SPLIT=n_split > 1, HAS_WINDOW=bool(sliding_window), DOT=dot_dtype(q.dtype, k_cache.dtype),
        PREC=dot_precision(q.dtype), num_warps=4, num_stages=2)
    if n_split > 1:
        _multi_query_merge_kernel[(n_tok, n_kv_heads)](
            mid_o, mid_lse, out, out.stride(0), out.stride(1), n_q_heads, head_dim,
            float(v_scale), n_split, GROUP=group,
            SPLIT_PAD=max(MAX_SPLITS, triton.next_power_of_2(n_split)), HEAD_DIM=head_pad,
            num_warps=4)
    return out
