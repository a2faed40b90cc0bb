"""MLA decode with the tokens as the MMA's M: a probe against mla_decode.py's kernel.

Why: mla_decode.py puts a program's (query, head) rows as the dots' M (16 at R1's tp8), so both
dots are mma.sync with the latent tile as the second operand, fed by ldmatrix: 3.6 SASS
instructions a latent element in the fp8 loop (mla_decode_ptx.py --fp8 --sass), and the fp8
kernel processes about bf16's elements a second (0.96-1.70 TB/s against 1.9-4.0). Here the
latent tile is the A operand of both dots, with the tokens as M (Hopper's wgmma needs M >= 64):
scores S^T [tokens, rows] = C [tokens, L + R] @ Q^T, values O^T [L, rows] += C^T [L, tokens] @
P^T, so a converted tile is stored to shared memory once and read by wgmma directly (A
transposed for the second dot, which wgmma allows for 16-bit operands), no ldmatrix, no padding
rows. The softmax then reduces along M (across warps) once a tile for 16 values a row.

Its partials use mla_decode.py's layout and merge kernel. Run on the GPU host:

    python research/probes/mla_tokens_as_m.py [--points 64x1024,256x4096] [--fp8-tiles 64x4x1x2,...]
    python research/probes/mla_tokens_as_m.py --ptx [--fp8] [--block-n 64 --warps 4 --stages 1]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from atom.kernels.triton.dot_dtype import dot_dtype
from atom.kernels.triton.e4m3 import load_e4m3_as_f16
from atom.kernels.triton.mla_decode import LOG2E, MAX_SPLITS, MERGE_CHUNK, _mla_merge_kernel
from atom.kernels.triton.paged_kv import paged_block_ids, paged_block_offsets

COPY_TBPS = 4.18


@triton.jit
def _cols(c_ptr, off, n_mask, first, BLOCK_N: tl.constexpr, W: tl.constexpr,
          DOT: tl.constexpr, E4M3: tl.constexpr):
    if E4M3:
        return load_e4m3_as_f16(c_ptr, off + first, n_mask, BLOCK_N, W)
    col = first + tl.arange(0, W)
    return tl.load(c_ptr + off[:, None] + col[None, :], mask=n_mask[:, None], other=0.0).to(DOT)


@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _tokens_m_kernel(q_ptr, c_ptr, mid_o_ptr, mid_lse_ptr, cu_q_ptr, ctx_ptr, bt_ptr,
                     q_tok_stride, q_head_stride, c_blk_stride, c_tok_stride, bt_stride,
                     qk_scale, n_heads, n_splits, L: tl.constexpr, HEADS: tl.constexpr,
                     M: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                     ROPE: tl.constexpr, DOT: tl.constexpr, E4M3: tl.constexpr):
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
    HALF: tl.constexpr = L // 2
    col = tl.arange(0, HALF)
    e = tl.arange(0, ROPE)
    # Q^T [K, rows]: each dot's B operand.
    qa = tl.trans(tl.load(q_row[:, None] + col[None, :], mask=r_mask[:, None], other=0.0).to(DOT))
    qb = tl.trans(tl.load(q_row[:, None] + HALF + col[None, :], mask=r_mask[:, None],
                          other=0.0).to(DOT))
    qp = tl.trans(tl.load(q_row[:, None] + L + e[None, :], mask=r_mask[:, None],
                          other=0.0).to(DOT))
    q_pos = ctx - q_len + qi

    per_split = tl.cdiv(tl.cdiv(ctx, n_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc_a = tl.zeros([HALF, M], tl.float32)
    acc_b = tl.zeros([HALF, M], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * bt_stride
    n = lo + tl.arange(0, BLOCK_N)
    blk_next = paged_block_ids(bt_row, n, n < hi, PAGE)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        blk = blk_next
        blk_next = paged_block_ids(bt_row, n + BLOCK_N, n + BLOCK_N < hi, PAGE)
        off = paged_block_offsets(blk, n, 0, c_blk_stride, c_tok_stride, 0, PAGE)
        ka = _cols(c_ptr, off, n_mask, 0, BLOCK_N, HALF, DOT, E4M3)
        kb = _cols(c_ptr, off, n_mask, HALF, BLOCK_N, HALF, DOT, E4M3)
        kp = _cols(c_ptr, off, n_mask, L, BLOCK_N, ROPE, DOT, E4M3)
        s = tl.dot(ka, qa)
        s = tl.dot(kb, qb, s)
        s = tl.dot(kp, qp, s) * qk_scale  # [BLOCK_N, M]
        s = tl.where(n_mask[:, None] & (n[:, None] <= q_pos[None, :]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[None, :])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 0)
        p = p.to(DOT)
        acc_a = tl.dot(tl.trans(ka), p, acc_a * alpha[None, :])
        acc_b = tl.dot(tl.trans(kb), p, acc_b * alpha[None, :])
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    mid_row = (tok * n_heads + head) * n_splits + split  # [M]
    row = mid_o_ptr + mid_row[None, :] * L
    tl.store(row + col[:, None], acc_a / l_safe[None, :], mask=r_mask[None, :])
    tl.store(row + HALF + col[:, None], acc_b / l_safe[None, :], mask=r_mask[None, :])
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
    tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)


def _sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def tokens_m_attention(q, cache, meta, lora: int, scale: float, kv_scale: float = 1.0,
                       block_n: int = 64, warps: int = 4, stages: int = 1, per_sm: int = 2,
                       splits: int | None = None, out=None):
    """mla_decode_attention's contract (q [T, H, L + R], R1's widths) by the tokens-as-M kernel
    and mla_decode.py's merge (always split: the probe's partials go through it)."""
    n_tok, n_heads, width = q.shape
    rope = width - lora
    q_pad = triton.next_power_of_2(meta.max_q_len)
    heads = max(1, min(triton.next_power_of_2(n_heads), 64 // q_pad))
    rows = max(16, q_pad * heads)
    tiles = triton.cdiv(n_heads, heads)
    batch = meta.num_seqs
    fp8 = cache.dtype == torch.float8_e4m3fn
    want = max(2, per_sm * _sms() // max(batch * tiles, 1))
    n_split = splits or min(MAX_SPLITS, 1 << (want.bit_length() - 1))
    out = q.new_empty(n_tok, n_heads, lora) if out is None else out
    f32 = dict(dtype=torch.float32, device=q.device)
    mid_o = torch.empty((n_tok, n_heads, n_split, lora), **f32)
    mid_lse = torch.empty((n_tok, n_heads, n_split), **f32)
    dot = dot_dtype(q.dtype, cache.dtype)
    _tokens_m_kernel[(tiles, batch, n_split)](
        q, cache, mid_o, mid_lse, meta.cu_seqlens_q, meta.context_lens, meta.block_tables,
        q.stride(0), q.stride(1), cache.stride(0), cache.stride(1), meta.block_tables.stride(0),
        scale * kv_scale * LOG2E, n_heads, n_split, L=lora, HEADS=heads, M=rows,
        PAGE=cache.shape[1], BLOCK_N=block_n, ROPE=rope, DOT=dot, E4M3=fp8, num_warps=warps,
        num_stages=stages)
    _mla_merge_kernel[(n_tok, n_heads)](
        mid_o, mid_lse, out, out.stride(0), out.stride(1), n_heads, n_split, float(kv_scale),
        L=lora, SPLIT_PAD=max(MAX_SPLITS, triton.next_power_of_2(n_split)), CHUNK=MERGE_CHUNK,
        LORA=lora, PDL=False, num_warps=4)
    return out


def ptx(fp8: bool, rows: int, block_n: int, warps: int, stages: int) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ptrs = ("q_ptr", "c_ptr", "mid_o_ptr", "mid_lse_ptr", "cu_q_ptr", "ctx_ptr", "bt_ptr")
    sig = {n: "*fp32" if n.startswith("mid") else "*i32" if n in ("cu_q_ptr", "ctx_ptr", "bt_ptr")
           else "*bf16" for n in ptrs}
    sig["c_ptr"] = "*fp8e4nv" if fp8 else "*bf16"
    sig |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "c_blk_stride", "c_tok_stride",
                               "bt_stride", "n_heads", "n_splits")}
    sig["qk_scale"] = "fp32"
    consts = dict(L=512, HEADS=rows, M=rows, PAGE=16, BLOCK_N=block_n, ROPE=64,
                  DOT=tl.float16 if fp8 else tl.bfloat16, E4M3=fp8)
    sig |= {k: "constexpr" for k in consts}
    sig = {n: sig[n] for n in _tokens_m_kernel.arg_names}
    names = list(sig)
    div16 = [n for n in names if n.endswith("_ptr") or n.endswith("_stride") and n != "bt_stride"
             or n == "n_heads"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = ASTSource(_tokens_m_kernel, sig, constexprs=consts, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=stages))
    return k.asm["ptx"], k.asm.get("ttgir", "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptx", action="store_true")
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--points", default="64x1024,128x1024,64x4096,128x4096,256x4096,256x8192")
    ap.add_argument("--fp8-tiles", default="64x4x1x2,64x4x2x2,64x8x1x1,64x8x1x2,128x8x1x1",
                    help="block_n x warps x stages x programs an SM")
    ap.add_argument("--bf16-tiles", default="64x4x2x2,64x4x3x1,128x8x1x1,128x8x2x1,64x8x2x2")
    ap.add_argument("--dtypes", default="fp8,bf16")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.ptx:
        import re
        code, ttgir = ptx(args.fp8, args.rows, args.block_n, args.warps, args.stages)
        for pat in ("wgmma.mma_async", "mma.sync", "ldmatrix", "st.shared", "ld.shared",
                    "cvt.rn.f16x2.e4m3x2", "ld.global", "bar.sync", "cp.async", "shfl"):
            print(f"{pat:24s} {len(re.findall(re.escape(pat), code))}")
        print([ln.strip() for ln in ttgir.splitlines() if "warp_group_dot" in ln or
               "local_alloc" in ln][:12])
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case

    from atom.kernels.triton.mla_decode import mla_decode_attention

    lora = R1_LATENT[0]
    res: dict[str, dict[str, float | str]] = {}
    for tag in args.dtypes.split(","):
        kvd = torch.float8_e4m3fn if tag == "fp8" else torch.bfloat16
        for point in args.points.split(","):
            batch, ctx = (int(v) for v in point.split("x"))
            q, cache, meta, byts = _mla_decode_case(batch, ctx, args.rows, kvd)
            out = torch.empty(q.shape[0], args.rows, lora, device="cuda", dtype=torch.bfloat16)
            ref = mla_decode_attention(q, cache, meta, lora, 192 ** -0.5).float()
            row: dict[str, float | str] = {
                "atom": round(byts / _graph_ms(lambda: mla_decode_attention(
                    q, cache, meta, lora, 192 ** -0.5, out=out)) / 1e9, 3)}
            for t in getattr(args, f"{tag}_tiles").split(","):
                bn, w, st, ps = (int(v) for v in t.split("x"))
                fn = (lambda bn=bn, w=w, st=st, ps=ps: tokens_m_attention(
                    q, cache, meta, lora, 192 ** -0.5, block_n=bn, warps=w, stages=st,
                    per_sm=ps, out=out))
                try:
                    fn()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    row[t] = round(byts / _graph_ms(fn) / 1e9, 3)
                    row[t + "_err"] = round(err, 5)
                except Exception as exc:  # a choice that does not compile or run
                    row[t] = f"{type(exc).__name__}: {str(exc)[:120]}"
            key = f"{tag}_b{batch}_ctx{ctx}"
            best = max((v, k) for k, v in row.items() if isinstance(v, float)
                       and not k.endswith("_err"))
            print(f"{key} TB/s: {json.dumps(row)} best {best[1]} {best[0]} "
                  f"({best[0] / COPY_TBPS:.0%} of copy)", flush=True)
            res[key] = row
            del q, cache
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
