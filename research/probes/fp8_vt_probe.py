"""Is fp8 decode attention bound by V's transpose? The same GQA decode kernel with V stored
transposed per page ([blocks, kv heads, D, page]) against atom's kernel over the same fp8 cache.

Why: the fp8 kernel reads 2.72-2.83 TB/s at 512 x 1.5k where bf16 reads 4.27 (NOTES, "#19").
Loading tiles ahead (run 70) and QK^T on e4m3 MMAs with the tokens as M (run 75) changed
nothing, so K is not the limit. V is the dot's second operand along its rows: with V row-major
its e4m3 pairs are widened, stored to shared memory as f16 and read back transposed (a barrier
and a round trip per tile, `decode_ptx.py --fp8`). Stored [D, page], V^T's rows are tokens and
both dots take their second operand the way K's takes it: the sm_90 PTX (Triton 3.9) has
both tiles in cp.async copies and no f16 store back to shared memory. P stays f16: with 16 query
rows Triton widens e4m3 dot operands to f16 for mma.sync anyway. Unsplit: at 512 sequences x 8
kv heads every SM has programs.

Run 78 (H200, 512 x 1.5k): slower, 2.29-2.60 TB/s against atom's kernel's 2.90 over the same
cache (bf16: 4.36), so V's round trip is not what bounds the fp8 kernel either.

    python research/probes/fp8_vt_probe.py [--batch 512 --ctx 1536] [--out r.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

from atom.kernels.triton.paged_decode_attention import LOG2E, decode_attention  # noqa: E402
from atom.kernels.triton.paged_kv import paged_kv_offsets  # noqa: E402
from probe_kit import gqa_query_group  # noqa: E402


@triton.jit
def _vt_decode_kernel(q_ptr, kc_ptr, vt_ptr, o_ptr, ctx_ptr, bt_ptr, q_tok_stride, q_head_stride,
                      c_blk_stride, c_tok_stride, c_head_stride, vt_blk_stride, vt_head_stride,
                      bt_stride, qk_scale, v_scale, GROUP: tl.constexpr, G_PAD: tl.constexpr,
                      PAGE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    ctx = tl.load(ctx_ptr + seq)
    q, heads, g_mask, d = gqa_query_group(q_ptr, seq, kvh, q_tok_stride, q_head_stride, GROUP,
                                          G_PAD, HEAD_DIM)
    q = q.to(tl.float16)
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, HEAD_DIM], tl.float32)
    bt_row = bt_ptr + seq * bt_stride
    for start in range(0, ctx, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < ctx
        kv_off = paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride,
                                  c_head_stride, PAGE)
        k = tl.load(kc_ptr + kv_off[:, None] + d[None, :], mask=n_mask[:, None], other=0.0)
        # V^T page by page ([D, pages, PAGE], contiguous along the last axis), masked by page,
        # not by token: a mask that changed inside a page would make every byte its own load.
        # The last page's slots past ctx hold finite stale values whose weights p are exactly 0.
        pg = start // PAGE + tl.arange(0, BLOCK_N // PAGE)
        pg_live = pg * PAGE < ctx
        blk = tl.load(bt_row + pg, mask=pg_live, other=0).to(tl.int64)
        vt_off = (blk * vt_blk_stride + kvh * vt_head_stride)[None, :, None] \
            + (d * PAGE)[:, None, None] + tl.arange(0, PAGE)[None, None, :]
        vt = tl.reshape(tl.load(vt_ptr + vt_off, mask=pg_live[None, :, None], other=0.0),
                        [HEAD_DIM, BLOCK_N])
        qk = tl.dot(q, tl.trans(k.to(tl.float16))) * qk_scale
        qk = tl.where(n_mask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), tl.trans(vt.to(tl.float16)))
        m_i = m_new
    out = acc / l_i[:, None] * v_scale
    tl.store(o_ptr + seq * q_tok_stride + heads[:, None] * q_head_stride + d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=g_mask[:, None])


def vt_decode(q, kc, vt, meta, scale, block_n: int, warps: int, stages: int, out):
    batch, hq, d = q.shape
    hk = kc.shape[2]
    _vt_decode_kernel[(batch, hk)](
        q, kc, vt, out, meta.context_lens, meta.block_tables, q.stride(0), q.stride(1),
        kc.stride(0), kc.stride(1), kc.stride(2), vt.stride(0), vt.stride(1),
        meta.block_tables.stride(0), scale * LOG2E, 1.0, GROUP=hq // hk,
        G_PAD=max(16, triton.next_power_of_2(hq // hk)), PAGE=kc.shape[1], BLOCK_N=block_n,
        HEAD_DIM=d, num_warps=warps, num_stages=stages)
    return out


def main() -> None:
    from probe_kit import decode_case
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=1536)
    ap.add_argument("--out")
    a = ap.parse_args()
    case = decode_case(a.batch, a.ctx)
    q, meta, d = case.q, case.meta, case.q.shape[-1]
    res: dict = {"batch": a.batch, "ctx": a.ctx}

    def timed(key, fn, kv_bytes, ref=None):
        try:
            out = fn()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            ms = do_bench(g.replay, warmup=5, rep=40, return_mode="median")
            res[key] = {"TBps": round(kv_bytes / ms / 1e9, 3)}
            if ref is not None:
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                res[key]["rel_err"] = float(f"{err:.2e}")
        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result
            res[key] = f"{type(e).__name__}: {str(e)[:160]}"
        print(key, res[key], flush=True)

    out = torch.empty_like(q)
    kb, vb = case.kc, case.vc  # one layer's bf16 cache, 3.2 GB: kept, the card has room
    timed("bf16_default", lambda: decode_attention(q, kb, vb, meta, d ** -0.5, out=out),
          2 * kb.numel() * 2)
    kc, vc = kb.to(torch.float8_e4m3fn), vb.to(torch.float8_e4m3fn)
    vt = vc.permute(0, 2, 3, 1).contiguous()  # [blocks, hk, D, page]
    ref = decode_attention(q, kc, vc, meta, d ** -0.5)
    timed("fp8_default", lambda: decode_attention(q, kc, vc, meta, d ** -0.5, out=out),
          2 * kc.numel(), ref)
    for bn, nw, st in ((64, 4, 3), (64, 4, 4), (128, 4, 2), (128, 4, 3), (128, 8, 3),
                       (64, 8, 4), (256, 8, 2)):
        o2 = torch.empty_like(q)
        timed(f"vt_n{bn}_w{nw}_st{st}",
              lambda: vt_decode(q, kc, vt, meta, d ** -0.5, bn, nw, st, o2), 2 * kc.numel(), ref)
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
