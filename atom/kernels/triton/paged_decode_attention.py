"""Decode attention (one query per sequence) over the paged KV cache, split-KV (flash-decoding).

One program owns one (sequence, kv head, split): it loads the GROUP query heads that share the kv
head, so each K/V byte is read from memory once however wide GQA is. Small batches cannot fill
the 132 SMs with one program per (sequence, kv head), so the context is cut into n_splits
slices. The split count depends only on the batch shape, never on context lengths, and every
length is read on the device: a captured CUDA graph replays correctly for any contexts.

The splits' partial softmax results are merged by a launch of their own, a program a (sequence,
query head), which under PDL is scheduled while the splits run. Merged in the split launch by
the last split to arrive at a counter, one program merges a kv head's four heads after the
counter's fence: in the 8B fp8 batch-1 step that took 5.6 µs a layer of attention's 9.2, this
launch ~2.0, and the step is 2.6% faster (bf16 1.2%); a program a kv head in a launch of its
own was slower than both (research/probes/decode_attn_parts.py through decode_step_takeaway.py;
the figures in benchmarks/results/H200.md, twenty-fourth session).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision, interpreted
from atom.kernels.triton.e4m3 import load_e4m3_as_f16
from atom.kernels.triton.paged_kv import paged_kv_offsets
from atom.kernels.triton.pdl import pdl_args, pdl_wait

LOG2E = 1.4426950408889634
MAX_SPLITS = 32  # the merge's width (SPLIT_PAD), shared with the MLA and multi-query kernels
# One sequence of 8 kv heads: 16 splits of 128-token tiles at 3 stages took 9.5 / 13.0 µs a
# layer over an fp8 cache at 1k / 4k against 11.8 / 13.45 at 32, and bf16 10.2 / 14.4 against
# 11.2 / 15.7 at 32 of 64 (research/probes/decode_attn_bs1_sweep.py).
DECODE_MAX_SPLITS = 16


@triton.jit
def _merge_splits(mid_o_ptr, mid_lse_ptr, o_ptr, seq64, heads_base, o_tok_stride, o_head_stride,
                  n_q_heads, head_dim, v_scale, n_splits, GROUP: tl.constexpr,
                  SPLIT_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """out = Σ_s exp2(lse_s − m) · o_s / Σ_s exp2(lse_s − m) for each of the GROUP heads, over
    the n_splits partials (SPLIT_PAD ≥ n_splits lanes, the rest masked). Loads bypass L1 (.cg):
    the partials were written by programs on other SMs."""
    s = tl.arange(0, SPLIT_PAD)
    s_mask = s < n_splits
    d = tl.arange(0, HEAD_DIM)
    for g in tl.static_range(GROUP):  # unrolled: the heads' loads issue together, not in turn
        head = heads_base + g
        row = (seq64 * n_q_heads + head) * n_splits
        lse = tl.load(mid_lse_ptr + row + s, mask=s_mask, other=float("-inf"), cache_modifier=".cg")
        m = tl.max(lse, 0)
        m = tl.where(m == float("-inf"), 0.0, m)
        w = tl.exp2(lse - m)
        part = tl.load(mid_o_ptr + (row + s)[:, None] * HEAD_DIM + d[None, :], mask=s_mask[:, None],
                       other=0.0, cache_modifier=".cg")
        total = tl.sum(w, 0)
        total = tl.where(total == 0.0, 1.0, total)
        out = tl.sum(part * w[:, None], 0) / total * v_scale
        tl.store(o_ptr + seq64 * o_tok_stride + head * o_head_stride + d,
                 out.to(o_ptr.dtype.element_ty), mask=d < head_dim)


# The block table's row stride is the batch's widest table outside CUDA graphs: specialised on it,
# the kernel compiled again mid-serving for each new divisibility (twice in one workload).
# The split count is a runtime value too: as a constexpr, each of its six values (1..32, one per
# range of batch sizes) was a variant of its own, ~0.8 s of compiling each at a cold start
# (4.8 of the 8.6 s a Qwen3-0.6B start spent compiling). Now there are two: split or not.
@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _decode_kernel(q_ptr, kc_ptr, vc_ptr, o_ptr, mid_o_ptr, mid_lse_ptr, ctx_ptr, bt_ptr,
                   q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                   c_blk_stride, c_tok_stride, c_head_stride, bt_stride,
                   qk_scale, v_scale, window, head_dim, n_q_heads, n_splits,
                   GROUP: tl.constexpr, G_PAD: tl.constexpr, PAGE: tl.constexpr,
                   BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, SPLIT: tl.constexpr,
                   HAS_WINDOW: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                   PDL: tl.constexpr, E4M3_REGS: tl.constexpr):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    # Context lengths are staged before the step's first kernel: safe to read before the wait.
    ctx = tl.load(ctx_ptr + seq)
    lo0 = 0
    if HAS_WINDOW:
        lo0 = tl.maximum(ctx - window, 0)
    per_split = tl.cdiv(tl.cdiv(ctx - lo0, n_splits), BLOCK_N) * BLOCK_N
    lo = lo0 + split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    seq64 = seq.to(tl.int64)
    bt_row = bt_ptr + seq64 * bt_stride
    # The block tables are staged with the context lengths: the first tile's entries load
    # before the wait, off the chain of dependent loads behind it.
    n = lo + tl.arange(0, BLOCK_N)
    first_off = paged_kv_offsets(bt_row, n, n < hi, kvh, c_blk_stride, c_tok_stride,
                                 c_head_stride, PAGE)
    pdl_wait(PDL)

    g = tl.arange(0, G_PAD)
    g_mask = g < GROUP
    heads = kvh * GROUP + g
    d = tl.arange(0, HEAD_DIM)
    d_mask = d < head_dim
    q = tl.load(q_ptr + seq64 * q_tok_stride + heads[:, None] * q_head_stride + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0).to(DOT)
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, HEAD_DIM], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        later = n >= lo + BLOCK_N  # past the first tile
        kv_off = tl.where(later, paged_kv_offsets(bt_row, n, n_mask & later, kvh, c_blk_stride,
                                                  c_tok_stride, c_head_stride, PAGE), first_off)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(kc_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        if E4M3_REGS:
            v = load_e4m3_as_f16(vc_ptr, kv_off, n_mask, BLOCK_N, HEAD_DIM)
        else:
            v = tl.load(vc_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PREC) * qk_scale
        qk = tl.where(n_mask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(qk - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    row_mask = g_mask[:, None] & d_mask[None, :]
    if not SPLIT:
        tl.store(o_ptr + seq64 * o_tok_stride + heads[:, None] * o_head_stride + d[None, :],
                 (out * v_scale).to(o_ptr.dtype.element_ty), mask=row_mask)
    else:
        # mid layout: [B, Hq, n_splits, HEAD_DIM] and [B, Hq, n_splits]
        mid_row = (seq64 * n_q_heads + heads) * n_splits + split
        tl.store(mid_o_ptr + mid_row[:, None] * HEAD_DIM + d[None, :], out, mask=row_mask)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(mid_lse_ptr + mid_row, lse, mask=g_mask)


@triton.jit
def _decode_merge_kernel(mid_o_ptr, mid_lse_ptr, o_ptr, o_tok_stride, o_head_stride, n_q_heads,
                         head_dim, v_scale, n_splits, SPLIT_PAD: tl.constexpr,
                         HEAD_DIM: tl.constexpr, PDL: tl.constexpr):
    """One (sequence, query head)'s partials merged, after the split launch (its PDL wait)."""
    pdl_wait(PDL)
    _merge_splits(mid_o_ptr, mid_lse_ptr, o_ptr, tl.program_id(0).to(tl.int64),
                  tl.program_id(1), o_tok_stride, o_head_stride, n_q_heads, head_dim, v_scale,
                  n_splits, 1, SPLIT_PAD, HEAD_DIM)


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_splits(batch: int, n_kv_heads: int, device: torch.device) -> int:
    """Enough (sequence, kv head, split) programs to give every SM about two; a function of the
    batch shape only, so a graph captured at batch size B stays right at any context length."""
    sms = _sm_count(device.index or 0) if device.type == "cuda" else 8
    want = triton.cdiv(2 * sms, max(batch * n_kv_heads, 1))
    return max(1, min(DECODE_MAX_SPLITS, triton.next_power_of_2(want)))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     meta: AttentionMetadata, scale: float, k_scale: float = 1.0,
                     v_scale: float = 1.0, sliding_window: int | None = None,
                     splits: int | None = None, block_n: int | None = None,
                     num_warps: int = 4, out: torch.Tensor | None = None,
                     num_stages: int | None = None) -> torch.Tensor:
    """q: [B, Hq, D] (one new token per sequence, already stored) → [B, Hq, D], written into
    `out` when given."""
    batch, n_q_heads, head_dim = q.shape
    out = torch.empty_like(q) if out is None else out
    if batch == 0:
        return out
    n_kv_heads = k_cache.shape[2]
    group = n_q_heads // n_kv_heads
    head_pad = triton.next_power_of_2(head_dim)
    n_split = splits or num_splits(batch, n_kv_heads, q.device)
    if n_split > 1:
        f32 = dict(dtype=torch.float32, device=q.device)
        mid_o = torch.empty((batch, n_q_heads, n_split, head_pad), **f32)
        mid_lse = torch.empty((batch, n_q_heads, n_split), **f32)
    else:
        mid_o = mid_lse = out
    fp8 = k_cache.dtype == torch.float8_e4m3fn  # 128-token tiles suit one-byte loads
    # Unsplit (large batches), 128-token tiles read bf16 faster too: 416 sequences at 1k / 1.5k /
    # 2k context, 4.04-4.23 TB/s against 3.90-4.15 at 64; split small
    # batches keep the 64 their sweep chose.
    wide = n_split >= DECODE_MAX_SPLITS  # one or two sequences: the sweep's tiles above
    block_n = block_n or (32 if head_pad > 128 else 128 if fp8 or wide or n_split == 1 else 64)
    # 416 x 1.5k: fp8 2.86 TB/s vs 2.61 at 2
    num_stages = num_stages or (3 if fp8 or wide else 2)
    _decode_kernel[(batch, n_kv_heads, n_split)](
        q, k_cache, v_cache, out, mid_o, mid_lse, meta.context_lens, meta.block_tables,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), meta.block_tables.stride(0),
        scale * k_scale * LOG2E, float(v_scale), int(sliding_window or 0), head_dim, n_q_heads,
        n_split, GROUP=group, G_PAD=max(16, triton.next_power_of_2(group)), PAGE=k_cache.shape[1],
        BLOCK_N=block_n, HEAD_DIM=head_pad, SPLIT=n_split > 1,
        HAS_WINDOW=bool(sliding_window), DOT=dot_dtype(q.dtype, k_cache.dtype),
        PREC=dot_precision(q.dtype), E4M3_REGS=fp8 and head_dim == head_pad and not interpreted(),
        num_warps=num_warps, num_stages=num_stages, **pdl_args(q.device))
    if n_split > 1:
        _decode_merge_kernel[(batch, n_q_heads)](
            mid_o, mid_lse, out, out.stride(0), out.stride(1), n_q_heads, head_dim,
            float(v_scale), n_split, SPLIT_PAD=max(MAX_SPLITS, triton.next_power_of_2(n_split)),
            HEAD_DIM=head_pad, num_warps=4, **pdl_args(q.device))
    return out
