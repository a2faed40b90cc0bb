"""Can a decode attention kernel reach HBM bandwidth from a fraction of the H200's SMs?

Why: overlap of decode attention with GEMMs (the only route to 12k tok/s for the 8B bf16 run,
`results/H200.md`, runs 13-18) needs the attention to leave most SMs to the GEMMs, and atom's
kernel (`atom/kernels/triton/paged_decode_attention.py`) moves only ~50 GB/s per SM: 2.4 TB/s on
48 SMs (run 15). Its K/V loads are per-thread gathers through cp.async. This probe's kernel
fetches each page of K and V with one TMA copy (a host tensor descriptor over the paged cache,
box = one page of one kv head), so an SM keeps many bytes in flight with few instructions.
Correctness is checked against atom's kernel; then TB/s of KV read on the whole GPU and on
16-80 SMs (CUDA green contexts), beside atom's kernel and beside atom's loads alone (the same
paged gather, summed: no softmax, no dots) on the same SMs.

Run 19 (b1c0838, before the loads-only kernel existed): TMA per page is slower per SM than
atom's kernel (0.97 vs 1.65 TB/s on 32 SMs). Run 20 (decode_attention_probe.py) measured the
loads alone: ~66 GB/s per SM (2.1 TB/s on 32 SMs), so the gather, not the per-token compute
chain, is what an SM is short of.

    python research/probes/tma_attention_probe.py --out probe.json
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
from typing import Any, Callable

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import (decode_case, error_text, gather_sum, median_ms, on_streams,
                       online_softmax_step, probe_meta, report)

LOG2E = 1.4426950408889634


@triton.jit
def _page(desc, bt_row, idx, kvh, PAGE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """One page of one kv head: [PAGE, HEAD_DIM], one TMA copy."""
    return desc.load([tl.load(bt_row + idx), 0, kvh, 0]).reshape([PAGE, HEAD_DIM])


@triton.jit
def _pages(desc, bt_row, first, kvh, PAGE: tl.constexpr, HEAD_DIM: tl.constexpr,
           PAGES: tl.constexpr):
    """PAGES consecutive pages of the block table as one [PAGES * PAGE, HEAD_DIM] tile."""
    if PAGES == 1:
        t = _page(desc, bt_row, first, kvh, PAGE, HEAD_DIM)
    elif PAGES == 2:
        t = tl.join(_page(desc, bt_row, first, kvh, PAGE, HEAD_DIM),
                    _page(desc, bt_row, first + 1, kvh, PAGE, HEAD_DIM))  # [PAGE, D, 2]
        t = tl.reshape(tl.permute(t, [2, 0, 1]), [2 * PAGE, HEAD_DIM])
    else:
        a = tl.join(_page(desc, bt_row, first, kvh, PAGE, HEAD_DIM),
                    _page(desc, bt_row, first + 1, kvh, PAGE, HEAD_DIM))
        b = tl.join(_page(desc, bt_row, first + 2, kvh, PAGE, HEAD_DIM),
                    _page(desc, bt_row, first + 3, kvh, PAGE, HEAD_DIM))
        t = tl.join(a, b)  # [PAGE, D, inner, outer]: page = 2 * outer + inner
        t = tl.reshape(tl.permute(t, [3, 2, 0, 1]), [4 * PAGE, HEAD_DIM])
    return t


@triton.jit
def _tma_decode_kernel(q_ptr, k_desc, v_desc, o_ptr, ctx_ptr, bt_ptr, bt_stride, qk_scale,
                       N_Q_HEADS: tl.constexpr, GROUP: tl.constexpr, G_PAD: tl.constexpr,
                       PAGE: tl.constexpr, HEAD_DIM: tl.constexpr, PAGES: tl.constexpr):
    """One program per (sequence, kv head), PAGES (1, 2 or 4) pages per iteration, one TMA copy
    per page. Every context is a multiple of PAGES pages here."""
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    ctx = tl.load(ctx_ptr + seq)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, HEAD_DIM)
    heads = kvh * GROUP + g
    q = tl.load(q_ptr + (seq * N_Q_HEADS + heads)[:, None] * HEAD_DIM + d[None, :],
                mask=(g < GROUP)[:, None], other=0.0)
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, HEAD_DIM], tl.float32)
    bt_row = bt_ptr + seq * bt_stride
    step: tl.constexpr = PAGE * PAGES
    for start in range(0, ctx, step):
        k = _pages(k_desc, bt_row, start // PAGE, kvh, PAGE, HEAD_DIM, PAGES)
        v = _pages(v_desc, bt_row, start // PAGE, kvh, PAGE, HEAD_DIM, PAGES)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        m_i, l_i, acc = online_softmax_step(qk, v, m_i, l_i, acc, v.dtype)
    out = acc / l_i[:, None]
    tl.store(o_ptr + (seq * N_Q_HEADS + heads)[:, None] * HEAD_DIM + d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(g < GROUP)[:, None])


def tma_decode(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, ctx: torch.Tensor,
               tables: torch.Tensor, pages: int = 4, num_warps: int = 4,
               num_stages: int = 3) -> torch.Tensor:
    """q [B, Hq, D]; caches [blocks, page, Hk, D] → [B, Hq, D] (every context a multiple of
    pages x page, as in this probe)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    b, hq, d = q.shape
    _, page, hk, _ = kc.shape
    box = [1, page, 1, d]
    out = torch.empty_like(q)
    _tma_decode_kernel[(b, hk)](
        q, TensorDescriptor.from_tensor(kc, box), TensorDescriptor.from_tensor(vc, box), out, ctx,
        tables, tables.stride(0), d ** -0.5 * LOG2E, N_Q_HEADS=hq, GROUP=hq // hk,
        G_PAD=max(16, triton.next_power_of_2(hq // hk)), PAGE=page, HEAD_DIM=d, PAGES=pages,
        num_warps=num_warps, num_stages=num_stages)
    return out


def main() -> None:
    from torch.cuda.green_contexts import GreenContext

    from atom.kernels.triton.paged_decode_attention import decode_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--variant", default=None, help="pages,warps,stages: skip the sweep")
    args = ap.parse_args()
    batch, ctx_len = 416, 1536
    case = decode_case(batch, ctx_len)
    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    ctx, tables, scale = meta.context_lens, meta.block_tables, q.shape[-1] ** -0.5
    ref = decode_attention(q, kc, vc, meta, scale)
    res = probe_meta(batch=batch, ctx=ctx_len)
    atom_kernel = lambda: decode_attention(q, kc, vc, meta, scale)  # noqa: E731
    loads_only = lambda: gather_sum(kc, vc, ctx, tables)  # noqa: E731

    def tb_s(fn: Callable[[], Any], stream: torch.cuda.Stream | None = None) -> float:
        """TB/s of KV read by fn, issued on `stream` (default: a side stream of the whole GPU)."""
        ms = median_ms(on_streams((stream or torch.cuda.Stream(), fn)), reps=20)
        return round(case.kv_bytes / ms / 1e9, 2)
    res["atom_all_sms_tb_s"] = tb_s(atom_kernel)
    res["loads_only_all_sms_tb_s"] = tb_s(loads_only)
    variants = [(p, w, s) for p in (1, 2, 4) for w in (4,) for s in (2, 3, 4, 6)]
    if args.variant:
        variants = [tuple(int(x) for x in args.variant.split(","))]
    for pages, warps, stages in variants:
        key = f"tma_p{pages}_w{warps}_st{stages}"
        try:
            run = lambda: tma_decode(q, kc, vc, ctx, tables, pages, warps, stages)  # noqa: E731
            err = ((run().float() - ref.float()).norm() / ref.float().norm()).item()
            res[f"{key}_rel_err"] = round(err, 5)
            res[f"{key}_tb_s"] = tb_s(run)
        except Exception as e:  # a variant that does not compile is a result too
            res[f"{key}_error"] = error_text(e)
        print(key, {k: v for k, v in res.items() if k.startswith(key)}, flush=True)
    tried = {f"tma_p{p}_w{w}_st{s}_tb_s": (p, w, s) for p, w, s in variants}
    best = max((k for k in tried if k in res), key=lambda k: res[k], default=None)
    if best is not None:
        pages, warps, stages = tried[best]
        res["best"] = best
        for n in (16, 32, 48, 64, 80):
            try:
                green = GreenContext.create(num_sms=n, device_id=0)  # alive while its stream runs
                stream = green.Stream()
                run = lambda: tma_decode(q, kc, vc, ctx, tables, pages, warps, stages)  # noqa: E731
                res[f"tma_{n}_sms_tb_s"] = tb_s(run, stream)
                res[f"atom_{n}_sms_tb_s"] = tb_s(atom_kernel, stream)
                res[f"loads_only_{n}_sms_tb_s"] = tb_s(loads_only, stream)
            except Exception as e:
                res[f"sms_{n}_error"] = error_text(e)
    report("tma_attention_probe", res, args.out)


if __name__ == "__main__":
    main()
