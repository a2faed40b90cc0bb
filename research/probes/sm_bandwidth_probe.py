"""How many bytes a second can one H200 SM pull from HBM, and does decode attention over large,
contiguous KV pages get there?

Why: 12k tok/s for the 8B bf16 run needs decode attention to run beside the GEMMs on part of the
GPU (results/H200.md), and atom's paged decode kernel moves ~50 GB/s per SM, its gather alone
~66 (runs 15, 20): on the ~48 SMs an overlap could spare, ~2.4 TB/s, not the ~4 it needs. This
separates what the hardware allows an SM from what the paged gather allows:
  stream_plain  each program reads its own contiguous K and V rows with plain 16-byte loads
  stream_tma    the same rows as TMA tiles feeding a dot, pipelined num_stages deep
  bigpage       decode attention (GQA heads as M, online softmax) over a cache whose pages are
                PAGE tokens of one kv head, contiguous ([blocks, kv heads, PAGE, D]), each tile
                one TMA copy: the candidate design
  atom          atom's kernel on its 16-token, tokens-outer pages (the baseline)
each on the whole GPU and on 32 / 48 / 64 SMs (CUDA green contexts), as TB/s of K and V read,
416 sequences x 1,536 context x 8 kv heads x 128 (the 8B run's decode step, one layer).
Run 27 (527d313, results/H200.md): TMA streams read 3.3 / 4.3 / 4.4 TB/s on 32 / 48 / 64 SMs
(plain loads 2.6 / 3.5 / 4.0), so an SM can read ~100 GB/s; bigpage reads 3.4 on 48 and 4.0 on
64 (atom's kernel 2.5 and 3.1) and 4.22-4.29 on all SMs (atom's 4.16). Run 28 then found that
even so, attention beside GEMMs on split SMs is slower than the two in series
(sm_partition_probe.py). Run 32 (644c9ad): fp8 bigpage 2.2-2.9 TB/s, as atom's fp8 kernel (the
conversion, not the loads, bounds it); bf16 bigpage 4.30-4.43 against 4.27. Run 33 put bigpage
into the engine (128-token heads-outer pages): its decode step's attention was 2% slower at the
8B run's mixed contexts, and it was reverted (results/H200.md).

    python research/probes/sm_bandwidth_probe.py --out probe.json
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
from typing import Any, Callable

import torch
import triton
import triton.language as tl

from atom.kernels.triton.dot_dtype import dot_dtype
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import (decode_case, error_text, median_ms, on_streams, online_softmax_step,
                       probe_meta, report)

BATCH, CTX, HQ, HK, D = 416, 1536, 32, 8, 128
SM_COUNTS = (32, 48, 64)
LOG2E = 1.4426950408889634


@triton.jit
def _stream_plain(k_ptr, v_ptr, o_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,
                  EVICT: tl.constexpr = ""):
    base = tl.program_id(0).to(tl.int64) * ROWS
    r = tl.arange(0, BLOCK)
    d = tl.arange(0, D)
    acc = tl.zeros([BLOCK, D], tl.float32)
    for start in range(0, ROWS, BLOCK):
        off = (base + start + r)[:, None] * D + d[None, :]
        acc += (tl.load(k_ptr + off, eviction_policy=EVICT).to(tl.float32)
                + tl.load(v_ptr + off, eviction_policy=EVICT).to(tl.float32))
    tl.store(o_ptr + tl.program_id(0) * D + d, tl.sum(acc, 0))


@triton.jit
def _stream_tma(k_desc, v_desc, o_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,
                DOT: tl.constexpr):
    base = tl.program_id(0) * ROWS
    ones = tl.full([16, BLOCK], 1.0, DOT)
    acc = tl.zeros([16, D], tl.float32)
    for start in range(0, ROWS, BLOCK):
        acc = tl.dot(ones, k_desc.load([base + start, 0]).to(DOT), acc)
        acc = tl.dot(ones, v_desc.load([base + start, 0]).to(DOT), acc)
    d = tl.arange(0, D)
    tl.store(o_ptr + tl.program_id(0) * D + d, tl.sum(acc, 0))


@triton.jit
def _bigpage_decode(q_ptr, k_desc, v_desc, o_ptr, ctx_ptr, bt_ptr, bt_stride, qk_scale,
                    HK: tl.constexpr, GROUP: tl.constexpr, G_PAD: tl.constexpr,
                    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                    DOT: tl.constexpr):
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    ctx = tl.load(ctx_ptr + seq)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    heads = kvh * GROUP + g
    q_off = (seq * HK * GROUP + heads)[:, None] * D + d[None, :]
    q = tl.load(q_ptr + q_off, mask=(g < GROUP)[:, None], other=0.0).to(DOT)
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    for start in range(0, ctx, BLOCK_N):
        blk = tl.load(bt_ptr + seq * bt_stride + start // PAGE)
        row = (blk * HK + kvh) * PAGE + start % PAGE
        k = k_desc.load([row, 0])
        v = v_desc.load([row, 0])
        qk = tl.dot(q, tl.trans(k.to(DOT))) * qk_scale
        qk = tl.where((start + tl.arange(0, BLOCK_N))[None, :] < ctx, qk, float("-inf"))
        m_i, l_i, acc = online_softmax_step(qk, v, m_i, l_i, acc, DOT)
    tl.store(o_ptr + q_off, (acc / l_i[:, None]).to(tl.bfloat16), mask=(g < GROUP)[:, None])


def _descs(k: torch.Tensor, v: torch.Tensor, block: int):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return (TensorDescriptor.from_tensor(k, [block, D]), TensorDescriptor.from_tensor(v, [block, D]))


def bigpage_case(page: int, batch: int = BATCH, ctx: int = CTX,
                 kv_dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    """A [blocks, HK, page, D] cache (blocks shuffled), its block tables, q, and a reference
    output for the first 4 sequences from the dense K/V (as stored: fp8 values when fp8)."""
    pages = ctx // page
    nblk = batch * pages
    bf = dict(device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(nblk, HK, page, D, **bf).to(kv_dtype) for _ in range(2))
    tables = torch.randperm(nblk, device="cuda", dtype=torch.int32).view(batch, pages)
    q = torch.randn(batch, HQ, D, **bf)
    ref = []
    for s in range(4):
        ks, vs = (c.view(torch.uint8)[tables[s].long()].view(c.dtype).permute(1, 0, 2, 3)
                  .reshape(HK, ctx, D).float() for c in (k, v))
        ks, vs = (t.repeat_interleave(HQ // HK, 0) for t in (ks, vs))
        w = torch.softmax(q[s].float().unsqueeze(1) @ ks.transpose(1, 2) * D ** -0.5, -1)
        ref.append((w @ vs).squeeze(1))
    return {"k": k.view(-1, D), "v": v.view(-1, D), "tables": tables, "q": q,
            "ctx": torch.full((batch,), ctx, device="cuda", dtype=torch.int32),
            "ref": torch.stack(ref), "page": page, "kv_bytes": 2 * k.numel() * k.element_size()}


def bigpage(case: dict[str, Any], block_n: int = 128, warps: int = 4,
            stages: int = 2) -> Callable[[], torch.Tensor]:
    """The bigpage kernel over `case` as a call (its best config on 48-64 SMs by default, run 27)."""
    kd, vd = _descs(case["k"], case["v"], block_n)
    out = torch.empty_like(case["q"])

    def run() -> torch.Tensor:
        _bigpage_decode[(case["q"].shape[0], HK)](
            case["q"], kd, vd, out, case["ctx"], case["tables"], case["tables"].stride(0),
            D ** -0.5 * LOG2E, HK=HK, GROUP=HQ // HK, G_PAD=16, PAGE=case["page"],
            BLOCK_N=block_n, D=D, DOT=dot_dtype(torch.bfloat16, case["k"].dtype),
            num_warps=warps, num_stages=stages)
        return out
    return run


def main() -> None:
    from torch.cuda.green_contexts import GreenContext

    from atom.kernels.triton.paged_decode_attention import decode_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--parts", default="streams,bigpage,atom", help="of streams,bigpage,bigpage_fp8,atom")
    args = ap.parse_args()
    parts = args.parts.split(",")
    res = probe_meta(batch=BATCH, ctx=CTX)
    bf16_bytes = 2 * BATCH * CTX * HK * D * 2
    green = [GreenContext.create(num_sms=n, device_id=0) for n in SM_COUNTS]  # held: see NOTES
    streams = {"all": torch.cuda.Stream(), **{str(n): g.Stream() for n, g in zip(SM_COUNTS, green)}}

    def measure(key: str, fn: Callable[[], Any], kv_bytes: int = bf16_bytes) -> None:
        for where, stream in streams.items():
            try:
                ms = median_ms(on_streams((stream, fn)), reps=10, inner=5)
                res[f"{key}_{where}"] = round(kv_bytes / ms / 1e9, 2)
            except Exception as e:  # a config that does not compile is a result too
                res[f"{key}_{where}"] = error_text(e)
                return
        print(key, {k: v for k, v in res.items() if k.startswith(key + "_")}, flush=True)

    if "streams" in parts:
        rows = BATCH * HK * CTX
        k, v = (torch.randn(rows, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        sink = torch.empty(BATCH * HK, D, device="cuda", dtype=torch.float32)
        for block, warps in ((64, 4), (128, 4), (128, 8)):
            measure(f"stream_plain_b{block}_w{warps}", lambda: _stream_plain[(BATCH * HK,)](
                k, v, sink, ROWS=CTX, BLOCK=block, D=D, num_warps=warps))
        for block, stages in ((64, 3), (64, 5), (128, 2), (128, 3)):
            kd, vd = _descs(k, v, block)
            measure(f"stream_tma_b{block}_st{stages}", lambda: _stream_tma[(BATCH * HK,)](
                kd, vd, sink, ROWS=CTX, BLOCK=block, D=D, DOT=dot_dtype(torch.bfloat16),
                num_warps=4, num_stages=stages))
        del k, v
    configs = []
    if "bigpage" in parts:  # run 27's six, then (128, 64, 4, 2/3): two programs an SM
        configs += [(torch.bfloat16, *c) for c in (
            (64, 64, 4, 3), (64, 64, 4, 4), (128, 64, 4, 4), (128, 128, 4, 2), (128, 128, 8, 2),
            (256, 128, 4, 2), (128, 64, 4, 2), (128, 64, 4, 3))]
    if "bigpage_fp8" in parts:
        configs += [(torch.float8_e4m3fn, *c) for c in (
            (128, 128, 4, 2), (128, 128, 4, 3), (256, 128, 4, 3), (256, 256, 8, 2), (128, 64, 4, 4))]
    for dtype, page, block_n, warps, stages in configs:
        tag = "fp8" if dtype == torch.float8_e4m3fn else "bf16"
        key = f"bigpage_{tag}_p{page}_n{block_n}_w{warps}_st{stages}"
        try:
            case = bigpage_case(page, kv_dtype=dtype)
            run = bigpage(case, block_n, warps, stages)
            err = (run()[:4].float() - case["ref"]).norm() / case["ref"].norm()
            res[f"{key}_rel_err"] = round(err.item(), 5)
            measure(key, run, case["kv_bytes"])
            del case
        except Exception as e:
            res[f"{key}_error"] = error_text(e, 300)
    if "atom" in parts:
        for dtype in (torch.bfloat16, torch.float8_e4m3fn):
            base = decode_case(BATCH, CTX, kv_dtype=dtype)
            measure(f"atom_page16_{'fp8' if dtype != torch.bfloat16 else 'bf16'}",
                    lambda: decode_attention(base.q, base.kc, base.vc, base.meta, D ** -0.5),
                    base.kv_bytes)
            del base
    report("sm_bandwidth_probe", res, args.out)

if __name__ == "__main__":
    main()
