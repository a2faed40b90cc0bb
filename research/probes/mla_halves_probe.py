"""MLA decode attention with the latent's first L dims in two halves: the scores are three dots
(two halves and the rope part, independent accumulators, summed) and the output two accumulators.

Why: at 16 heads a program the scores' dot is one chain of 36 dependent mma.sync (576 / 16) per
warp and 16-token slice (research/probes/mla_decode_ptx.py: warps split the tokens), and both MLA
kernels, bf16 and fp8, process the same ~1.55 G latent elements a second (run 93: 3.1 and 1.54
TB/s at 256 x 4k), so a per-element latency common to both is the suspect. Halves cut the chain
to 16 + 16 + 4 in parallel. Prints TB/s of latent read by atom's kernel and this variant at the
issue's points, bf16 and fp8, defaults' tiles, and checks the variant's output against atom's.

    python research/probes/mla_halves_probe.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case  # noqa: E402

from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision  # noqa: E402
from atom.kernels.triton.e4m3 import load_e4m3_as_f16  # noqa: E402
from atom.kernels.triton.mla_decode import (_mla_merge_kernel, head_tile,  # noqa: E402
                                            mla_decode_attention, num_splits, tile_defaults)
from atom.kernels.triton.paged_decode_attention import LOG2E, MAX_SPLITS  # noqa: E402

COPY_TBPS = 4.18


@triton.jit
def _half(c_ptr, off, n_mask, BLOCK_N: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr,
          E4M3_REGS: tl.constexpr):
    if E4M3_REGS:
        return load_e4m3_as_f16(c_ptr, off, n_mask, BLOCK_N, W).to(DOT)
    col = tl.arange(0, W)
    return tl.load(c_ptr + off[:, None] + col[None, :], mask=n_mask[:, None], other=0.0).to(DOT)


@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _mla_halves_kernel(q_ptr, c_ptr, mid_o_ptr, mid_lse_ptr, cu_q_ptr, ctx_ptr, bt_ptr,
                       q_tok_stride, q_head_stride, c_blk_stride, c_tok_stride, bt_stride,
                       qk_scale, n_heads, n_splits, L: tl.constexpr, HEADS: tl.constexpr,
                       M: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                       ROPE: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                       E4M3_REGS: tl.constexpr):
    """R1's widths only (L = 512, rope 64: no column masks); always writes split partials."""
    H: tl.constexpr = L // 2
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(ctx_ptr + seq)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    r = tl.arange(0, M)
    qi = r // HEADS
    head = tile * HEADS + r % HEADS
    r_mask = (qi < q_len) & (head < n_heads)
    tok = (q_start + qi).to(tl.int64)
    q_row = q_ptr + tok * q_tok_stride + head * q_head_stride
    ch = tl.arange(0, H)
    e = tl.arange(0, ROPE)
    q_a = tl.load(q_row[:, None] + ch[None, :], mask=r_mask[:, None], other=0.0).to(DOT)
    q_b = tl.load(q_row[:, None] + H + ch[None, :], mask=r_mask[:, None], other=0.0).to(DOT)
    q_pe = tl.load(q_row[:, None] + L + e[None, :], mask=r_mask[:, None], other=0.0).to(DOT)
    q_pos = ctx - q_len + qi
    per_split = tl.cdiv(tl.cdiv(ctx, n_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc_a = tl.zeros([M, H], tl.float32)
    acc_b = tl.zeros([M, H], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * bt_stride
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        blk = tl.load(bt_row + n // PAGE, mask=n_mask, other=0).to(tl.int64)
        off = blk * c_blk_stride + (n % PAGE) * c_tok_stride
        kv_a = _half(c_ptr, off, n_mask, BLOCK_N, H, DOT, E4M3_REGS)
        kv_b = _half(c_ptr, off + H, n_mask, BLOCK_N, H, DOT, E4M3_REGS)
        pe = _half(c_ptr, off + L, n_mask, BLOCK_N, ROPE, DOT, E4M3_REGS)
        qk = (tl.dot(q_a, tl.trans(kv_a), input_precision=PREC)
              + tl.dot(q_b, tl.trans(kv_b), input_precision=PREC)
              + tl.dot(q_pe, tl.trans(pe), input_precision=PREC)) * qk_scale
        qk = tl.where(n_mask[None, :] & (n[None, :] <= q_pos[:, None]), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(qk - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        pd = p.to(DOT)
        acc_a = acc_a * alpha[:, None] + tl.dot(pd, kv_a, input_precision=PREC)
        acc_b = acc_b * alpha[:, None] + tl.dot(pd, kv_b, input_precision=PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    mid_row = (tok * n_heads + head) * n_splits + split
    base = mid_o_ptr + mid_row[:, None] * L
    tl.store(base + ch[None, :], acc_a / l_safe[:, None], mask=r_mask[:, None])
    tl.store(base + H + ch[None, :], acc_b / l_safe[:, None], mask=r_mask[:, None])
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
    tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)


def mla_halves(q, cache, meta, scale, out, block_n=None, num_warps=None, num_stages=None):
    n_tok, n_heads, width = q.shape
    lora, rope = R1_LATENT
    heads = head_tile(n_heads, 1)
    tiles = triton.cdiv(n_heads, heads)
    fp8 = cache.dtype == torch.float8_e4m3fn
    bn, warps, stages, per_sm = tile_defaults(max(16, heads), fp8)
    n_split = max(2, num_splits(meta.num_seqs, tiles, q.device, per_sm))
    f32 = dict(dtype=torch.float32, device=q.device)
    mid_o = torch.empty((n_tok, n_heads, n_split, lora), **f32)
    mid_lse = torch.empty((n_tok, n_heads, n_split), **f32)
    _mla_halves_kernel[(tiles, meta.num_seqs, n_split)](
        q, cache, mid_o, mid_lse, meta.cu_seqlens_q, meta.context_lens, meta.block_tables,
        q.stride(0), q.stride(1), cache.stride(0), cache.stride(1), meta.block_tables.stride(0),
        scale * LOG2E, n_heads, n_split, L=lora, HEADS=heads, M=max(16, heads),
        PAGE=cache.shape[1], BLOCK_N=block_n or bn, ROPE=rope,
        DOT=dot_dtype(q.dtype, cache.dtype), PREC=dot_precision(q.dtype), E4M3_REGS=fp8,
        num_warps=num_warps or warps, num_stages=num_stages or stages)
    _mla_merge_kernel[(n_tok, triton.cdiv(n_heads, 8))](
        mid_o, mid_lse, out, out.stride(0), out.stride(1), n_heads, n_split, 1.0, L=lora,
        HEADS=8, SPLIT_PAD=max(MAX_SPLITS, triton.next_power_of_2(n_split)), LORA=lora,
        PDL=False, num_warps=4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res: dict[str, float | str] = {}
    scale = 192 ** -0.5
    for kvd, tag in ((torch.float8_e4m3fn, "fp8"), (torch.bfloat16, "bf16")):
        for b, c in ((64, 1024), (64, 4096), (128, 1024), (128, 4096), (256, 4096)):
            q, cache, meta, byts = _mla_decode_case(b, c, 16, kvd)
            ref = torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
            got = torch.empty_like(ref)
            ms = _graph_ms(lambda: mla_decode_attention(q, cache, meta, R1_LATENT[0], scale, 1.0,
                                                        out=ref))
            key = f"{tag}_b{b}_ctx{c}"
            res[f"{key}_atom"] = round(byts / (ms * 1e-3) / 1e12, 3)
            for tile in (None, (64, 4, 1), (128, 8, 2), (64, 8, 2), (128, 4, 1)):
                kw = {} if tile is None else dict(zip(("block_n", "num_warps", "num_stages"),
                                                      tile))
                name = f"{key}_halves" + ("" if tile is None else "_n{}_w{}_st{}".format(*tile))
                try:
                    ms = _graph_ms(lambda: mla_halves(q, cache, meta, scale, got, **kw))
                    err = (got.float() - ref.float()).abs().max().item()
                    res[name] = round(byts / (ms * 1e-3) / 1e12, 3)
                    res[name + "_maxerr"] = round(err, 5)
                except Exception as ex:
                    res[name] = type(ex).__name__
            print(key, {k[len(key) + 1:]: v for k, v in res.items() if k.startswith(key)},
                  flush=True)
            del q, cache
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
