"""MLA decode attention over the paged latent cache: the absorbed form, multi-query attention of
q [T, H, L + R] (W_UK folded in) over one shared latent "head" [L + R] per token → [T, H, L].

Every query head reads the same latent vector, so one program owns a tile of heads (and, for
q_len > 1, every query of its sequence: rows are (query, head) pairs) and reads each latent page
once for the whole tile; both products are tensor-core dots (scores against the whole latent,
values against its first L dims: the rope part only scores). R1's 128 heads at tp1 are two
64-head tiles, 16 heads per rank at tp8 one.

Split-KV (flash-decoding) as in paged_decode_attention.py: the context is cut into n_splits
slices, a count that depends only on the batch shape (sequences × head tiles, num_splits), and
the partial results are merged by log-sum-exp in a second small launch. Every length is read on
the device: no host sync and a grid from the batch shape only, so a captured CUDA graph replays
for any contexts. A sequence's q_len queries (speculative verify: k + 1) sit at positions
[ctx − q_len, ctx) and are causal among themselves, as the metadata describes every row.

An fp8 e4m3 cache (per-tensor scale) is converted to f16 in registers right after its load
(e4m3.load_e4m3_as_f16, once a latent element, then one shared-memory tile both dots read) and
both dots run in fp16; the scale folds into the score scale and the output.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision, interpreted
from atom.kernels.triton.e4m3 import load_e4m3_as_f16
from atom.kernels.triton.paged_decode_attention import LOG2E, MAX_SPLITS
from atom.kernels.triton.paged_kv import paged_block_ids, paged_block_offsets
from atom.kernels.triton.pdl import pdl_args, pdl_wait


@triton.jit
def _load_cols(c_ptr, off, n_mask, first, end, BLOCK_N: tl.constexpr, W: tl.constexpr,
               DOT: tl.constexpr, E4M3_REGS: tl.constexpr):
    """Columns [first, first + W) of the latents at `off` as a [BLOCK_N, W] tile in the dot
    dtype, those at or past `end` zero (E4M3_REGS: none are, the widths are exact)."""
    if E4M3_REGS:
        return load_e4m3_as_f16(c_ptr, off + first, n_mask, BLOCK_N, W).to(DOT)  # f32 models
    col = first + tl.arange(0, W)
    return tl.load(c_ptr + off[:, None] + col[None, :],
                   mask=n_mask[:, None] & (col < end)[None, :], other=0.0).to(DOT)


# bt_stride: the batch's widest block table outside graphs; n_splits: a runtime value, so split
# counts share one variant (paged_decode_attention.py says what specialising them cost).
@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _mla_decode_kernel(q_ptr, c_ptr, o_ptr, mid_o_ptr, mid_lse_ptr, cu_q_ptr, ctx_ptr, bt_ptr,
                       q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                       c_blk_stride, c_tok_stride, bt_stride, qk_scale, kv_scale,
                       n_heads, n_splits, L: tl.constexpr, R: tl.constexpr,
                       HEADS: tl.constexpr, M: tl.constexpr, PAGE: tl.constexpr,
                       BLOCK_N: tl.constexpr, LORA: tl.constexpr, ROPE: tl.constexpr,
                       SPLIT: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                       PDL: tl.constexpr, E4M3_REGS: tl.constexpr):
    tile = tl.program_id(0)  # fastest in launch order: a sequence's tiles share its pages in L2
    seq = tl.program_id(1)
    split = tl.program_id(2)
    # Context lengths are staged before the step's first kernel: safe to read before the wait.
    ctx = tl.load(ctx_ptr + seq)
    pdl_wait(PDL)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    r = tl.arange(0, M)
    qi = r // HEADS
    head = tile * HEADS + r % HEADS
    r_mask = (qi < q_len) & (head < n_heads)
    tok = (q_start + qi).to(tl.int64)
    q_row = q_ptr + tok * q_tok_stride + head * q_head_stride
    # The first L dims in two halves: the scores are three independent dots (16, 16 and 4
    # mma.sync deep a warp at R1's widths, where one [L + R] dot is a chain of 36).
    HALF: tl.constexpr = LORA // 2
    col = tl.arange(0, HALF)
    e = tl.arange(0, ROPE)
    q_a = tl.load(q_row[:, None] + col[None, :],
                  mask=r_mask[:, None] & (col < L)[None, :], other=0.0).to(DOT)
    q_b = tl.load(q_row[:, None] + HALF + col[None, :],
                  mask=r_mask[:, None] & (HALF + col < L)[None, :], other=0.0).to(DOT)
    q_pe = tl.load(q_row[:, None] + L + e[None, :],
                   mask=r_mask[:, None] & (e < R)[None, :], other=0.0).to(DOT)
    q_pos = ctx - q_len + qi

    per_split = tl.cdiv(tl.cdiv(ctx, n_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc_a = tl.zeros([M, HALF], tl.float32)
    acc_b = tl.zeros([M, HALF], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * bt_stride
    n = lo + tl.arange(0, BLOCK_N)
    blk_next = paged_block_ids(bt_row, n, n < hi, PAGE)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        blk = blk_next
        blk_next = paged_block_ids(bt_row, n + BLOCK_N, n + BLOCK_N < hi, PAGE)
        off = paged_block_offsets(blk, n, 0, c_blk_stride, c_tok_stride, 0, PAGE)
        kv_a = _load_cols(c_ptr, off, n_mask, 0, L, BLOCK_N, HALF, DOT, E4M3_REGS)
        kv_b = _load_cols(c_ptr, off, n_mask, HALF, L, BLOCK_N, HALF, DOT, E4M3_REGS)
        pe = _load_cols(c_ptr, off, n_mask, L, L + R, BLOCK_N, ROPE, DOT, E4M3_REGS)
        qk = (tl.dot(q_a, tl.trans(kv_a), input_precision=PREC)
              + tl.dot(q_b, tl.trans(kv_b), input_precision=PREC)
              + tl.dot(q_pe, tl.trans(pe), input_precision=PREC)) * qk_scale
        qk = tl.where(n_mask[None, :] & (n[None, :] <= q_pos[:, None]), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(qk - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(DOT)
        acc_a = acc_a * alpha[:, None] + tl.dot(p, kv_a, input_precision=PREC)
        acc_b = acc_b * alpha[:, None] + tl.dot(p, kv_b, input_precision=PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if not SPLIT:
        row = o_ptr + tok[:, None] * o_tok_stride + head[:, None] * o_head_stride
        scale = kv_scale / l_safe[:, None]
        tl.store(row + col[None, :], (acc_a * scale).to(o_ptr.dtype.element_ty),
                 mask=r_mask[:, None] & (col < L)[None, :])
        tl.store(row + HALF + col[None, :], (acc_b * scale).to(o_ptr.dtype.element_ty),
                 mask=r_mask[:, None] & (HALF + col < L)[None, :])
    else:
        # mid layout: [T, H, n_splits, LORA] and [T, H, n_splits]
        mid_row = (tok * n_heads + head) * n_splits + split
        row = mid_o_ptr + mid_row[:, None] * LORA
        tl.store(row + col[None, :], acc_a / l_safe[:, None],
                 mask=r_mask[:, None] & (col < L)[None, :])
        tl.store(row + HALF + col[None, :], acc_b / l_safe[:, None],
                 mask=r_mask[:, None] & (HALF + col < L)[None, :])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)


# Splits merged a chunk at a time: [CHUNK, 512] fp32 is 32 registers a thread at 4 warps, and
# the batches that split most (32 at batch 1) take four chunks instead of 32 dependent loads.
MERGE_CHUNK = 8


@triton.jit(do_not_specialize=["n_splits"])
def _mla_merge_kernel(mid_o_ptr, mid_lse_ptr, o_ptr, o_tok_stride, o_head_stride, n_heads,
                      n_splits, kv_scale, L: tl.constexpr, SPLIT_PAD: tl.constexpr,
                      CHUNK: tl.constexpr, LORA: tl.constexpr, PDL: tl.constexpr):
    """out = Σ_s exp2(lse_s − m) · o_s / Σ_s exp2(lse_s − m) for one (token, head). Each chunk
    of splits is one load of [CHUNK, LORA] partials: summed one split at a time, the loads form
    a dependent chain that took 5-7 µs of a 40-110 µs call at 64-256 × 1k-8k on the H200
    (research/probes/mla_decode_phases.py)."""
    pdl_wait(PDL)
    tok = tl.program_id(0).to(tl.int64)
    row = (tok * n_heads + tl.program_id(1)) * n_splits
    s = tl.arange(0, SPLIT_PAD)
    m = tl.max(tl.load(mid_lse_ptr + row + s, mask=s < n_splits, other=float("-inf")), 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    c = tl.arange(0, CHUNK)
    col = tl.arange(0, LORA)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([LORA], tl.float32)
    for first in range(0, n_splits, CHUNK):
        live = first + c < n_splits
        w = tl.exp2(tl.load(mid_lse_ptr + row + first + c, mask=live, other=float("-inf")) - m)
        part = tl.load(mid_o_ptr + (row + first + c)[:, None] * LORA + col[None, :],
                       mask=live[:, None], other=0.0)
        total += tl.sum(w, 0)
        acc += tl.sum(w[:, None] * part, 0)
    total = tl.where(total == 0.0, 1.0, total)
    tl.store(o_ptr + tok * o_tok_stride + tl.program_id(1) * o_head_stride + col,
             (acc / total * kv_scale).to(o_ptr.dtype.element_ty), mask=col < L)


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count \
        if device.type == "cuda" else 8


def num_splits(batch: int, tiles: int, device: torch.device, per_sm: int = 1) -> int:
    """About `per_sm` programs per SM, never more (a function of the batch shape only, as a
    captured graph needs). Fewer than the GQA kernel's two per SM: a split's partial is 2 KB of
    fp32 a query head (written, then read by the merge) against 1,152 bytes per cached latent, so
    at 64 sequences × 128 heads × 1k tokens four splits would move more partial bytes than
    cache."""
    want = max(1, per_sm * _sm_count(device) // max(batch * tiles, 1))
    return min(MAX_SPLITS, 1 << (want.bit_length() - 1))


def head_tile(n_heads: int, q_pad: int) -> int:
    """Heads per program: up to 64 rows of (query, head) pairs (FlashMLA's tile): the smallest
    M of Hopper's wgmma, so R1's 128 heads read each latent page twice. At 64 rows the [64, 512]
    fp32 accumulator is 128 registers a thread at 8 warps (research/probes/mla_decode_ptx.py, at
    16-token tiles: bf16 fits in 245, fp8 spills ~150 bytes); 16 and 32 rows run on mma.sync and
    do not spill."""
    return max(1, min(triton.next_power_of_2(n_heads), 64 // q_pad))


def tile_defaults(rows: int, fp8: bool, one_wave: bool) -> tuple[int, int, int, int]:
    """(block_n, num_warps, num_stages, programs per SM the split count aims at), measured on
    the H200 at R1's widths, batch 64-256 x 1k-8k (research/probes/mla_decode_tiles.py): at 16
    rows (16 heads, tp8) bf16 takes 64-token tiles on 4 warps, two programs an SM: 2.76-3.62
    TB/s at 4k against 2.41-3.12 for 128-token tiles on 8 warps (2.19 against 2.32 at 128 x 1k,
    the one point it loses). Where the batch's programs fill at most half the SMs at one split
    (one_wave: up to 66 sequences at 16 heads on 132 SMs), one program an SM three stages deep
    instead: its programs fill the pipeline once for twice the tiles, 64 x 1k 1.80 -> 1.92-2.02
    TB/s, 4k 3.05 -> 3.12, 8k 3.49 -> 3.46. At 128 sequences it gains at 1k (2.43 ->
    2.65) but loses at 4k and 8k (3.49 -> 3.29, 3.85 -> 3.44), and a captured graph's tiles
    cannot depend on the contexts, so 128 keeps two programs an SM. At 64 rows (128 heads) 64-token tiles, 0.85 TB/s bf16
    and 0.29 fp8 against 0.41 and 0.11 at 16 (there the kernel is bound by its dots: 242 FLOP a
    latent byte). fp8 runs unpipelined (its tile is converted in registers; staged through
    shared memory first it read no faster): at 16 rows it hides the loads' latency with
    occupancy instead, 4 warps and twice the splits (1.25-1.60 TB/s at 64-256 x 4k, against
    1.15-1.56 at 8 warps)."""
    if fp8:
        return (64, 4, 1, 2) if rows <= 16 else (64, 8, 1, 1)
    if rows <= 16:
        return (64, 4, 3, 1) if one_wave else (64, 4, 2, 2)
    if rows < 64:
        return 64, 4, 2, 1
    return 64, 8, 2, 1


def mla_decode_attention(q: torch.Tensor, latent_cache: torch.Tensor, meta: AttentionMetadata,
                         kv_lora_rank: int, scale: float, kv_scale: float = 1.0,
                         splits: int | None = None, block_n: int | None = None,
                         heads_per_tile: int | None = None, num_warps: int | None = None,
                         num_stages: int | None = None,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """q: [T, H, L + R] (every sequence of meta, any q_len ≤ meta.max_q_len, its tokens already
    stored); latent_cache [num_blocks, block_size, L + R] → [T, H, L]."""
    n_tok, n_heads, width = q.shape
    lora, rope = kv_lora_rank, width - kv_lora_rank
    out = q.new_empty(n_tok, n_heads, lora) if out is None else out
    batch = meta.num_seqs
    if n_tok == 0 or batch == 0:
        return out
    q_pad = triton.next_power_of_2(meta.max_q_len)
    heads = heads_per_tile or head_tile(n_heads, q_pad)
    rows = max(16, q_pad * heads)
    tiles = triton.cdiv(n_heads, heads)
    fp8 = latent_cache.dtype == torch.float8_e4m3fn
    one_wave = 2 * batch * tiles <= _sm_count(q.device)
    bn, warps, stages, per_sm = tile_defaults(rows, fp8, one_wave)
    n_split = splits or num_splits(batch, tiles, q.device, per_sm)
    lora_pad = max(32, triton.next_power_of_2(lora))  # two halves, each a dot's K >= 16
    rope_pad = max(16, triton.next_power_of_2(rope))
    if n_split > 1:
        f32 = dict(dtype=torch.float32, device=q.device)
        mid_o = torch.empty((n_tok, n_heads, n_split, lora_pad), **f32)
        mid_lse = torch.empty((n_tok, n_heads, n_split), **f32)
    else:
        mid_o = mid_lse = out
    in_regs = fp8 and lora == lora_pad and rope == rope_pad and not interpreted()
    pdl = pdl_args(q.device)
    _mla_decode_kernel[(tiles, batch, n_split)](
        q, latent_cache, out, mid_o, mid_lse, meta.cu_seqlens_q, meta.context_lens,
        meta.block_tables, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        latent_cache.stride(0), latent_cache.stride(1), meta.block_tables.stride(0),
        scale * kv_scale * LOG2E, float(kv_scale), n_heads, n_split, L=lora, R=rope, HEADS=heads,
        M=rows, PAGE=latent_cache.shape[1],
        BLOCK_N=block_n or bn, LORA=lora_pad, ROPE=rope_pad, SPLIT=n_split > 1,
        DOT=dot_dtype(q.dtype, latent_cache.dtype), PREC=dot_precision(q.dtype),
        E4M3_REGS=in_regs, num_warps=num_warps or warps, num_stages=num_stages or stages, **pdl)
    if n_split > 1:
        _mla_merge_kernel[(n_tok, n_heads)](
            mid_o, mid_lse, out, out.stride(0), out.stride(1), n_heads, n_split,
            float(kv_scale), L=lora, SPLIT_PAD=max(MAX_SPLITS, triton.next_power_of_2(n_split)),
            CHUNK=MERGE_CHUNK, LORA=lora_pad,
            num_warps=4, **pdl)
    return out
