"""Causal attention over the paged KV cache for variable-length query chunks.

Covers prefill, chunked prefill and prefix-cache hits with one kernel: sequence i's q_len new
queries sit at positions [ctx_i - q_len_i, ctx_i) and attend to keys [0, ctx_i) gathered through
the block table, so a cached prefix is just keys the chunk did not write. Keys are gathered per
token (block id = table[n // block_size]), which makes any block size work and keeps the kernel
free of host-side per-sequence work. Online softmax in base 2, float32 accumulation.

A mixed chunked-prefill batch sends its leading decodes to the decode kernel and the rest here
with `first_seq`, not as sliced metadata: a slice at an offset that is not a multiple of four
changes Triton's pointer-alignment specialisation, and every new alignment was a fresh compile
in the middle of serving. The block table's row stride (the batch's widest table) is left
unspecialised for the same reason.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision
from atom.kernels.triton.paged_kv import paged_kv_offsets

LOG2E = 1.4426950408889634


@triton.jit(do_not_specialize=["bt_stride", "first_seq"])
def _prefill_kernel(q_ptr, kc_ptr, vc_ptr, o_ptr, cu_q_ptr, ctx_ptr, bt_ptr,
                    q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                    c_blk_stride, c_tok_stride, c_head_stride, bt_stride,
                    qk_scale, v_scale, window, head_dim, first_seq,
                    GROUP: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, HAS_WINDOW: tl.constexpr,
                    DOT: tl.constexpr, PREC: tl.constexpr):
    mblk = tl.program_id(0)
    seq = first_seq + tl.program_id(1)
    head = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    if mblk * BLOCK_M < q_len:
        ctx = tl.load(ctx_ptr + seq)
        prefix = ctx - q_len
        m_offs = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
        q_pos = prefix + m_offs
        m_mask = m_offs < q_len
        d = tl.arange(0, HEAD_DIM)
        d_mask = d < head_dim
        q_rows = (q_start + m_offs).to(tl.int64)
        q = tl.load(q_ptr + q_rows[:, None] * q_tok_stride + head * q_head_stride + d[None, :],
                    mask=m_mask[:, None] & d_mask[None, :], other=0.0).to(DOT)
        kvh = head // GROUP
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        hi = tl.minimum(ctx, prefix + (mblk + 1) * BLOCK_M)
        lo = 0
        if HAS_WINDOW:
            lo = tl.maximum(prefix + mblk * BLOCK_M - window + 1, 0)
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
        out = acc / l_safe[:, None] * v_scale
        tl.store(o_ptr + q_rows[:, None] * o_tok_stride + head * o_head_stride + d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=m_mask[:, None] & d_mask[None, :])


def prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      meta: AttentionMetadata, scale: float, k_scale: float = 1.0,
                      v_scale: float = 1.0, sliding_window: int | None = None,
                      first_seq: int = 0) -> torch.Tensor:
    """q: [T, Hq, D] → [T, Hq, D]; the chunk's own k/v must already be in the cache. Sequences
    before `first_seq` are left out (their output rows are not written)."""
    n_tok, n_q_heads, head_dim = q.shape
    out = torch.empty_like(q)
    if n_tok == 0 or meta.num_seqs == first_seq:
        return out
    n_kv_heads = k_cache.shape[2]
    head_pad = triton.next_power_of_2(head_dim)
    block_m = 64 if meta.max_q_len > 32 else 16
    block_n = 64 if head_pad <= 128 else 32
    grid = (triton.cdiv(meta.max_q_len, block_m), meta.num_seqs - first_seq, n_q_heads)
    _prefill_kernel[grid](
        q, k_cache, v_cache, out, meta.cu_seqlens_q, meta.context_lens, meta.block_tables,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), meta.block_tables.stride(0),
        scale * k_scale * LOG2E, float(v_scale), int(sliding_window or 0), head_dim, first_seq,
        GROUP=n_q_heads // n_kv_heads, PAGE=k_cache.shape[1], BLOCK_M=block_m, BLOCK_N=block_n,
        HEAD_DIM=head_pad, HAS_WINDOW=bool(sliding_window),
        DOT=dot_dtype(q.dtype, k_cache.dtype), PREC=dot_precision(q.dtype), num_warps=4,
        num_stages=2)
    return out
