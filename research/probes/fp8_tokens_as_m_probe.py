"""Can decode attention over an fp8 KV cache take its QK^T on fp8 tensor cores?

Why: atom's decode kernel reads an fp8 cache at 2.72 TB/s against 4.27 for bf16 (512 × 1.5k,
H200.md run 70), which decides issue 19's 18k tok/s: every K and V element is converted to f16
in registers before a dot. Hopper's e4m3 wgmma takes M >= 64 rows, and GQA's group of query
heads (4 for Llama-3.1-8B) pads to 16. This probe's kernel puts the tokens in M instead:
s^T = K · q^T ([BLOCK_N, 16] from K's [BLOCK_N, D] e4m3 rows and q quantized to e4m3 per
head), both operands
K-major as fp8 wgmma needs, so K is never converted; the softmax runs down the columns and
out^T = V^T · p^T keeps V in f16 (e4m3 pairs converted in registers, as atom's kernel does).
One program per (sequence, kv head), no split: the large-batch serving case. TB/s of K + V
read, beside atom's kernel on the same cache, and the error of each against the torch reference.

Run 75 (H200.md): no faster. 64-token tiles, 4 warps, 2 stages: 2.73 / 2.62 / 2.29 TB/s at
512 × 1.5k / 416 × 1.5k / 256 × 1k against atom's 2.83 / 2.55 / 2.23, at 2.6% relative error
from q's e4m3 rounding (atom's 0.08%). K's conversion is not what holds the fp8 kernel back.

    python research/probes/fp8_tokens_as_m_probe.py --out probe.json
    python research/probes/fp8_tokens_as_m_probe.py --ptx   # any machine: the MMAs sm_90 gets
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import decode_case, error_text, gqa_query_group, median_ms, probe_meta, report

from atom.kernels.triton.e4m3 import load_e4m3_as_f16
from atom.kernels.triton.paged_kv import paged_kv_offsets

LOG2E = 1.4426950408889634
SHAPES = ((512, 1536), (416, 1536), (256, 1024))
CONFIGS = ((64, 4, 2), (64, 4, 3), (128, 4, 2), (128, 8, 2), (128, 8, 3), (64, 8, 3))


@triton.jit
def _tokens_as_m_kernel(q_ptr, kc_ptr, vc_ptr, o_ptr, ctx_ptr, bt_ptr, q_tok_stride,
                        q_head_stride, o_tok_stride, o_head_stride, c_blk_stride, c_tok_stride,
                        c_head_stride, bt_stride, qk_scale, v_scale, GROUP: tl.constexpr,
                        G_PAD: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, PAIRS: tl.constexpr):
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    ctx = tl.load(ctx_ptr + seq)
    q, heads, g_mask, d = gqa_query_group(q_ptr, seq, kvh, q_tok_stride, q_head_stride, GROUP,
                                          G_PAD, HEAD_DIM)
    q = q.to(tl.float32)
    q_amax = tl.maximum(tl.max(tl.abs(q), 1), 1e-12)
    q_scale = q_amax / 448.0
    q8 = (q / q_scale[:, None]).to(tl.float8e4nv, fp_downcast_rounding="rtne")
    col_scale = q_scale * qk_scale
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([HEAD_DIM, G_PAD], tl.float32)
    bt_row = bt_ptr + seq * bt_stride
    for start in range(0, ctx, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < ctx
        off = paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                               PAGE)
        k = tl.load(kc_ptr + off[:, None] + d[None, :], mask=n_mask[:, None], other=0.0)
        s = tl.dot(k, tl.trans(q8)) * col_scale[None, :]  # [BLOCK_N, G_PAD]
        s = tl.where(n_mask[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[None, :])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 0)
        if PAIRS:
            v = load_e4m3_as_f16(vc_ptr, off, n_mask, BLOCK_N, HEAD_DIM)
        else:  # the interpreter has no inline PTX
            v = tl.load(vc_ptr + off[:, None] + d[None, :], mask=n_mask[:, None],
                        other=0.0).to(tl.float16)
        acc = acc * alpha[None, :] + tl.dot(tl.trans(v), p.to(tl.float16))  # [D, G_PAD]
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[None, :]
    tl.store(o_ptr + seq * o_tok_stride + heads[None, :] * o_head_stride + d[:, None],
             (out * v_scale).to(o_ptr.dtype.element_ty), mask=g_mask[None, :])


def tokens_as_m(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, meta, scale: float,
                block_n: int, num_warps: int, num_stages: int) -> torch.Tensor:
    batch, hq, d = q.shape
    hk = kc.shape[2]
    out = torch.empty_like(q)
    _tokens_as_m_kernel[(batch, hk)](
        q, kc, vc, out, meta.context_lens, meta.block_tables, q.stride(0), q.stride(1),
        out.stride(0), out.stride(1), kc.stride(0), kc.stride(1), kc.stride(2),
        meta.block_tables.stride(0), scale * LOG2E, 1.0, GROUP=hq // hk,
        G_PAD=max(16, triton.next_power_of_2(hq // hk)), PAGE=kc.shape[1], BLOCK_N=block_n,
        HEAD_DIM=d, PAIRS=q.is_cuda, num_warps=num_warps, num_stages=num_stages)
    return out


def _row(batch: int, ctx: int) -> dict[str, Any]:
    from atom.kernels import torch_ref
    from atom.kernels.triton.paged_decode_attention import decode_attention

    torch.manual_seed(0)
    case = decode_case(batch, ctx, kv_dtype=torch.float8_e4m3fn)
    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    scale = q.shape[-1] ** -0.5
    ref = torch_ref.attention(q, kc, vc, meta, scale, 1.0, 1.0, None).float()
    row: dict[str, Any] = {}
    runs = {"atom": lambda: decode_attention(q, kc, vc, meta, scale)}
    for bn, w, st in CONFIGS:
        runs[f"tokens_as_m_n{bn}_w{w}_st{st}"] = (
            lambda bn=bn, w=w, st=st: tokens_as_m(q, kc, vc, meta, scale, bn, w, st))
    for name, run in runs.items():
        try:
            err = ((run().float() - ref).norm() / ref.norm()).item()
            ms = median_ms(run, reps=10, inner=5)
            row[name] = {"tb_s": round(case.kv_bytes / ms / 1e9, 3), "rel_err": round(err, 5)}
        except Exception as e:
            row[name] = {"error": error_text(e, 300)}
    return row


def ptx_mmas() -> None:
    """Compile the kernel for sm_90 (no GPU needed) and print, per tile choice, the tensor-core
    instructions in its PTX: e4m3 wgmma for QK^T, f16 wgmma for P·V."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"q_ptr": "*bf16", "kc_ptr": "*fp8e4nv", "vc_ptr": "*fp8e4nv", "o_ptr": "*bf16",
           "ctx_ptr": "*i32", "bt_ptr": "*i32", "qk_scale": "fp32", "v_scale": "fp32"}
    sig |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                               "c_blk_stride", "c_tok_stride", "c_head_stride", "bt_stride")}
    for bn, w, st in CONFIGS:
        consts = dict(GROUP=4, G_PAD=16, PAGE=16, BLOCK_N=bn, HEAD_DIM=128, PAIRS=True)
        src = ASTSource(_tokens_as_m_kernel, sig | {k: "constexpr" for k in consts},
                        constexprs=consts)
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                             options=dict(num_warps=w, num_stages=st)).asm["ptx"]
        mmas = sorted(set(re.findall(r"(?:mma\.sync|wgmma\.mma_async)[\w.]*", ptx)))
        print(f"n{bn}_w{w}_st{st}", mmas, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--ptx", action="store_true", help="print the sm_90 MMAs and stop")
    args = ap.parse_args()
    if args.ptx:
        ptx_mmas()
        return
    res: dict[str, Any] = probe_meta()
    for batch, ctx in SHAPES:
        res[f"fp8_{batch}x{ctx}"] = row = _row(batch, ctx)
        print(f"fp8 {batch}x{ctx}", row, flush=True)
        torch.cuda.empty_cache()
    report("fp8_tokens_as_m_probe", res, args.out)


if __name__ == "__main__":
    main()
