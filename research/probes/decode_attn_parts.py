"""Batch-1 GQA decode attention with one part taken out at a time, for decode_step_takeaway.py's
`parts_*` arms: where the kernel's ~9 µs a layer in the fp8 8B step go (its marginal cost,
decode_step_timeline.py, H200.md run 132), against ~0.6 µs for its 2.4 MB at the read rate.

A copy of atom/kernels/triton/paged_decode_attention.py's `_decode_kernel` (one sequence, one
tile a split: the 8B's 1,128-token context in 16 splits of 128) with switches; outputs are
wrong in every arm but `parts_full`, only the time is read:
  NO_MERGE  the splits store their partials, no counter, no merge;
  NO_KV     no K / V loads (zero tiles), the dots and softmax as they are;
  NO_DOTS   K / V loaded and summed, no dots, no softmax;
  PRE_KV    the whole first tile's K / V loaded before the PDL wait (the newest row too:
            stale in a real step; the timing of a kernel whose loads all precede the wait);
  SEP_MERGE (with NO_MERGE) the partials merged by a launch of their own (PDL), a program a
            query head (SEP_MERGE_KV: a program a kv head's GROUP heads), as MLA decode does.
parts_full and both SEP_MERGE forms give the kernel's output.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.dot_dtype import interpreted
from atom.kernels.triton.e4m3 import load_e4m3_as_f16
from atom.kernels.triton.paged_decode_attention import LOG2E, MAX_SPLITS, _merge_splits
from atom.kernels.triton.paged_kv import paged_kv_offsets
from atom.kernels.triton.pdl import pdl_args, pdl_wait

FLAGS = ("NO_MERGE", "NO_KV", "NO_DOTS", "PRE_KV")
LAUNCH_FLAGS = ("SEP_MERGE", "SEP_MERGE_KV")


@triton.jit
def _merge_kernel(mid_o_ptr, mid_lse_ptr, o_ptr, o_tok_stride, o_head_stride, n_q_heads,
                  head_dim, v_scale, n_splits, GROUP: tl.constexpr, SPLIT_PAD: tl.constexpr,
                  HEAD_DIM: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    _merge_splits(mid_o_ptr, mid_lse_ptr, o_ptr, tl.program_id(0).to(tl.int64),
                  tl.program_id(1) * GROUP, o_tok_stride, o_head_stride, n_q_heads, head_dim,
                  v_scale, n_splits, GROUP, SPLIT_PAD, HEAD_DIM)


@triton.jit
def _tile(kc_ptr, vc_ptr, kv_off, n_mask, d, d_mask, BLOCK_N: tl.constexpr,
          HEAD_DIM: tl.constexpr, NO_KV: tl.constexpr, E4M3_REGS: tl.constexpr):
    if NO_KV:
        k = tl.zeros([BLOCK_N, HEAD_DIM], tl.float16)
        v = tl.zeros([BLOCK_N, HEAD_DIM], tl.float16)
    else:
        k = tl.load(kc_ptr + kv_off[:, None] + d[None, :],
                    mask=n_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float16)
        if E4M3_REGS:
            v = load_e4m3_as_f16(vc_ptr, kv_off, n_mask, BLOCK_N, HEAD_DIM)
        else:  # the interpreter has no inline asm
            v = tl.load(vc_ptr + kv_off[:, None] + d[None, :], mask=n_mask[:, None],
                        other=0.0).to(tl.float16)
    return k, v


@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _parts_kernel(q_ptr, kc_ptr, vc_ptr, o_ptr, mid_o_ptr, mid_lse_ptr, count_ptr, ctx_ptr,
                  bt_ptr, q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                  c_blk_stride, c_tok_stride, c_head_stride, bt_stride, qk_scale, v_scale,
                  head_dim, n_q_heads, n_splits, GROUP: tl.constexpr, G_PAD: tl.constexpr,
                  PAGE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                  SPLIT_PAD: tl.constexpr, PDL: tl.constexpr, NO_MERGE: tl.constexpr,
                  NO_KV: tl.constexpr, NO_DOTS: tl.constexpr, PRE_KV: tl.constexpr,
                  E4M3_REGS: tl.constexpr):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(ctx_ptr + seq)
    per_split = tl.cdiv(tl.cdiv(ctx, n_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    seq64 = seq.to(tl.int64)
    bt_row = bt_ptr + seq64 * bt_stride
    n = lo + tl.arange(0, BLOCK_N)
    n_mask = n < hi
    kv_off = paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride,
                              c_head_stride, PAGE)
    d = tl.arange(0, HEAD_DIM)
    d_mask = d < head_dim
    if PRE_KV:
        k, v = _tile(kc_ptr, vc_ptr, kv_off, n_mask, d, d_mask, BLOCK_N, HEAD_DIM, NO_KV, E4M3_REGS)
        pdl_wait(PDL)
    else:
        pdl_wait(PDL)
        k, v = _tile(kc_ptr, vc_ptr, kv_off, n_mask, d, d_mask, BLOCK_N, HEAD_DIM, NO_KV, E4M3_REGS)
    g = tl.arange(0, G_PAD)
    g_mask = g < GROUP
    heads = kvh * GROUP + g
    q = tl.load(q_ptr + seq64 * q_tok_stride + heads[:, None] * q_head_stride + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float16)
    if NO_DOTS:
        kv = tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
        out = q.to(tl.float32) + kv[None, :]
        m_i = tl.zeros([G_PAD], tl.float32)
        l_i = tl.full([G_PAD], 1.0, tl.float32)
    else:
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        qk = tl.where(n_mask[None, :], qk, float("-inf"))
        m_i = tl.max(qk, 1)
        m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
        p = tl.exp2(qk - m_safe[:, None])
        l_i = tl.sum(p, 1)
        out = tl.dot(p.to(tl.float16), v) / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    row_mask = g_mask[:, None] & d_mask[None, :]
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    mid_row = (seq64 * n_q_heads + heads) * n_splits + split
    tl.store(mid_o_ptr + mid_row[:, None] * HEAD_DIM + d[None, :], out, mask=row_mask)
    tl.store(mid_lse_ptr + mid_row, tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe)),
             mask=g_mask)
    if NO_MERGE:
        if split == 0:  # something of this head's output, so the next kernel has a writer
            tl.store(o_ptr + seq64 * o_tok_stride + heads[:, None] * o_head_stride + d[None, :],
                     out.to(o_ptr.dtype.element_ty), mask=row_mask)
    else:
        tl.debug_barrier()
        count = count_ptr + seq64 * tl.num_programs(1) + kvh
        if tl.atomic_add(count, 1, sem="acq_rel", scope="gpu") == n_splits - 1:
            _merge_splits(mid_o_ptr, mid_lse_ptr, o_ptr, seq64, kvh * GROUP, o_tok_stride,
                          o_head_stride, n_q_heads, head_dim, v_scale, n_splits, GROUP,
                          SPLIT_PAD, HEAD_DIM)
            tl.store(count, 0)


def attention_parts(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta,
                    scale: float, k_scale: float, v_scale: float, flags: frozenset[str],
                    splits: int = 16, block_n: int = 128, num_warps: int = 4,
                    num_stages: int = 3) -> torch.Tensor:
    """The decode kernel's call for one sequence over an fp8 cache, with `flags` (FLAGS) on."""
    batch, n_q_heads, head_dim = q.shape
    assert batch == 1 and k_cache.dtype == torch.float8_e4m3fn and head_dim == 128
    n_kv = k_cache.shape[2]
    out = torch.empty_like(q)
    f32 = dict(dtype=torch.float32, device=q.device)
    mid_o = torch.empty((batch, n_q_heads, splits, head_dim), **f32)
    mid_lse = torch.empty((batch, n_q_heads, splits), **f32)
    counters = torch.zeros(batch * n_kv, dtype=torch.int32, device=q.device)
    _parts_kernel[(batch, n_kv, splits)](
        q, k_cache, v_cache, out, mid_o, mid_lse, counters, meta.context_lens,
        meta.block_tables, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), meta.block_tables.stride(0),
        scale * k_scale * LOG2E, float(v_scale), head_dim, n_q_heads, splits,
        GROUP=n_q_heads // n_kv, G_PAD=16, PAGE=k_cache.shape[1], BLOCK_N=block_n,
        HEAD_DIM=head_dim, SPLIT_PAD=MAX_SPLITS, num_warps=num_warps, num_stages=num_stages,
        E4M3_REGS=not interpreted(), **{f: f in flags for f in FLAGS}, **pdl_args(q.device))
    if flags & set(LAUNCH_FLAGS):
        group = n_q_heads // n_kv if "SEP_MERGE_KV" in flags else 1
        _merge_kernel[(batch, n_q_heads // group)](
            mid_o, mid_lse, out, out.stride(0), out.stride(1), n_q_heads, head_dim,
            float(v_scale), splits, GROUP=group, SPLIT_PAD=MAX_SPLITS, HEAD_DIM=head_dim,
            num_warps=4, **pdl_args(q.device))
    return out
