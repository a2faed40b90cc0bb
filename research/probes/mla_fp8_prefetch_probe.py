"""MLA decode over an fp8 latent cache with the next tile loaded one iteration ahead, as 32-bit
words, against atom's kernel.

Why: the fp8 latent is converted in registers (atom/kernels/triton/e4m3.py), so Triton's stages
do not prefetch it, and every iteration waits on the latents it consumes: the fp8 kernel reads
about as many latent elements a second as the bf16 one (run 96: 1.25 against 1.38 G/ms at 64 ×
4k), half the bytes. A tile carried across the loop as int8 takes a register a byte (it spilled,
seventeenth session); as int32 words a 64-token tile is 72 registers a thread at 4 warps. The
variant is a copy of atom's kernel with that loop (the fp8 path only), swapped into atom's module
for its measurement. It sums the scores over the latent's columns in another order, so its
output is compared to atom's by the largest difference, not for equality.

    python research/probes/mla_fp8_prefetch_probe.py [--sass] [--out FILE]

`--sass` compiles both for sm_90 here (no GPU; Triton 3.6 as on the GPU host) and prints the KV
loop's instruction counts and ptxas's registers and spills.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from atom.kernels.triton import mla_decode  # noqa: E402
from atom.kernels.triton.paged_kv import paged_block_ids  # noqa: E402
from atom.kernels.triton.pdl import pdl_wait  # noqa: E402


@triton.jit
def _words(w_ptr, woff, n_mask, first, NW: tl.constexpr):
    """Words [first, first + NW) of the rows at word offsets `woff` (4 e4m3 values a word)."""
    return tl.load(w_ptr + woff[:, None] + first + tl.arange(0, NW)[None, :],
                   mask=n_mask[:, None], other=0)


@triton.jit
def _f16x4(w, DOT: tl.constexpr):
    """[N, NW] words → four [N, NW] f16 tiles: tile j holds byte j of each word, i.e. columns
    4k + j (little-endian). No tile goes back to the natural column order: a join and reshape
    compiled to register shuffles and a second shared-memory round trip (--sass: 6 instructions
    an element against 3.2); the dots take the columns permuted instead, q's and the output's
    alike."""
    # Two words a call: byte j of both gathered by one prmt into the pair cvt converts, so each
    # output register is two neighbours of tile j (f16x2), as the shared-memory store wants.
    o0, o1, o2, o3 = tl.inline_asm_elementwise(
        asm="{ .reg .b32 t, u; .reg .b16 x, y; "
            "prmt.b32 t, $4, $5, 0x5140; prmt.b32 u, $4, $5, 0x7362; "
            "mov.b32 {x, y}, t; cvt.rn.f16x2.e4m3x2 $0, x; cvt.rn.f16x2.e4m3x2 $1, y; "
            "mov.b32 {x, y}, u; cvt.rn.f16x2.e4m3x2 $2, x; cvt.rn.f16x2.e4m3x2 $3, y; }",
        constraints="=r,=r,=r,=r,r,r", args=[w], dtype=(tl.float16,) * 4, is_pure=False,
        pack=2)
    return o0.to(DOT), o1.to(DOT), o2.to(DOT), o3.to(DOT)


@triton.jit
def _q4(q_row, r_mask, first, NW: tl.constexpr, DOT: tl.constexpr):
    """q's columns first + 4k + j, k < NW, as four [M, NW] tiles (j = 0..3)."""
    k = first + 4 * tl.arange(0, NW)
    base = q_row[:, None] + k[None, :]
    return (tl.load(base, mask=r_mask[:, None], other=0.0).to(DOT),
            tl.load(base + 1, mask=r_mask[:, None], other=0.0).to(DOT),
            tl.load(base + 2, mask=r_mask[:, None], other=0.0).to(DOT),
            tl.load(base + 3, mask=r_mask[:, None], other=0.0).to(DOT))


@triton.jit
def _qk4(q0, q1, q2, q3, k0, k1, k2, k3, PREC: tl.constexpr):
    return (tl.dot(q0, tl.trans(k0), input_precision=PREC)
            + tl.dot(q1, tl.trans(k1), input_precision=PREC)
            + tl.dot(q2, tl.trans(k2), input_precision=PREC)
            + tl.dot(q3, tl.trans(k3), input_precision=PREC))


@triton.jit
def _store4(ptr, row, first, a0, a1, a2, a3, r_mask, NW: tl.constexpr):
    """Output tiles j = 0..3 back to columns first + 4k + j."""
    k = first + 4 * tl.arange(0, NW)
    base = ptr + row[:, None] + k[None, :]
    ty = ptr.dtype.element_ty
    tl.store(base, a0.to(ty), mask=r_mask[:, None])
    tl.store(base + 1, a1.to(ty), mask=r_mask[:, None])
    tl.store(base + 2, a2.to(ty), mask=r_mask[:, None])
    tl.store(base + 3, a3.to(ty), mask=r_mask[:, None])


@triton.jit(do_not_specialize=["bt_stride", "n_splits"])
def _prefetch_kernel(q_ptr, c_ptr, o_ptr, mid_o_ptr, mid_lse_ptr, cu_q_ptr, ctx_ptr, bt_ptr,
                     q_tok_stride, q_head_stride, o_tok_stride, o_head_stride,
                     c_blk_stride, c_tok_stride, bt_stride, qk_scale, kv_scale,
                     n_heads, n_splits, L: tl.constexpr, R: tl.constexpr,
                     HEADS: tl.constexpr, M: tl.constexpr, PAGE: tl.constexpr,
                     BLOCK_N: tl.constexpr, LORA: tl.constexpr, ROPE: tl.constexpr,
                     SPLIT: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                     PDL: tl.constexpr, E4M3_REGS: tl.constexpr):
    tl.static_assert(E4M3_REGS and LORA == L and ROPE == R)
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
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
    HALF: tl.constexpr = LORA // 2
    HW: tl.constexpr = HALF // 4
    RW: tl.constexpr = ROPE // 4
    qa0, qa1, qa2, qa3 = _q4(q_row, r_mask, 0, HW, DOT)
    qb0, qb1, qb2, qb3 = _q4(q_row, r_mask, HALF, HW, DOT)
    qp0, qp1, qp2, qp3 = _q4(q_row, r_mask, L, RW, DOT)
    q_pos = ctx - q_len + qi

    per_split = tl.cdiv(tl.cdiv(ctx, n_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    a0 = tl.zeros([M, HW], tl.float32)
    a1 = tl.zeros([M, HW], tl.float32)
    a2 = tl.zeros([M, HW], tl.float32)
    a3 = tl.zeros([M, HW], tl.float32)
    b0 = tl.zeros([M, HW], tl.float32)
    b1 = tl.zeros([M, HW], tl.float32)
    b2 = tl.zeros([M, HW], tl.float32)
    b3 = tl.zeros([M, HW], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * bt_stride
    w_ptr = c_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    blk_w = c_blk_stride // 4
    tok_w = c_tok_stride // 4
    n = lo + tl.arange(0, BLOCK_N)
    n_mask = n < hi
    blk = paged_block_ids(bt_row, n, n_mask, PAGE)
    woff = blk.to(tl.int64) * blk_w + (n % PAGE) * tok_w
    w_a = _words(w_ptr, woff, n_mask, 0, HW)
    w_b = _words(w_ptr, woff, n_mask, HW, HW)
    w_pe = _words(w_ptr, woff, n_mask, L // 4, RW)
    blk_next = paged_block_ids(bt_row, n + BLOCK_N, n + BLOCK_N < hi, PAGE)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        ka0, ka1, ka2, ka3 = _f16x4(w_a, DOT)
        kb0, kb1, kb2, kb3 = _f16x4(w_b, DOT)
        kp0, kp1, kp2, kp3 = _f16x4(w_pe, DOT)
        n2 = n + BLOCK_N
        n2_mask = n2 < hi
        woff = blk_next.to(tl.int64) * blk_w + (n2 % PAGE) * tok_w
        blk_next = paged_block_ids(bt_row, n2 + BLOCK_N, n2 + BLOCK_N < hi, PAGE)
        w_a = _words(w_ptr, woff, n2_mask, 0, HW)
        w_b = _words(w_ptr, woff, n2_mask, HW, HW)
        w_pe = _words(w_ptr, woff, n2_mask, L // 4, RW)
        qk = (_qk4(qa0, qa1, qa2, qa3, ka0, ka1, ka2, ka3, PREC)
              + _qk4(qb0, qb1, qb2, qb3, kb0, kb1, kb2, kb3, PREC)
              + _qk4(qp0, qp1, qp2, qp3, kp0, kp1, kp2, kp3, PREC)) * qk_scale
        qk = tl.where(n_mask[None, :] & (n[None, :] <= q_pos[:, None]), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(qk - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(DOT)
        al = alpha[:, None]
        a0 = a0 * al + tl.dot(p, ka0, input_precision=PREC)
        a1 = a1 * al + tl.dot(p, ka1, input_precision=PREC)
        a2 = a2 * al + tl.dot(p, ka2, input_precision=PREC)
        a3 = a3 * al + tl.dot(p, ka3, input_precision=PREC)
        b0 = b0 * al + tl.dot(p, kb0, input_precision=PREC)
        b1 = b1 * al + tl.dot(p, kb1, input_precision=PREC)
        b2 = b2 * al + tl.dot(p, kb2, input_precision=PREC)
        b3 = b3 * al + tl.dot(p, kb3, input_precision=PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if not SPLIT:
        row = tok * o_tok_stride + head * o_head_stride
        s = (kv_scale / l_safe)[:, None]
        _store4(o_ptr, row, 0, a0 * s, a1 * s, a2 * s, a3 * s, r_mask, HW)
        _store4(o_ptr, row, HALF, b0 * s, b1 * s, b2 * s, b3 * s, r_mask, HW)
    else:
        mid_row = (tok * n_heads + head) * n_splits + split
        s = (1.0 / l_safe)[:, None]
        _store4(mid_o_ptr, mid_row * LORA, 0, a0 * s, a1 * s, a2 * s, a3 * s, r_mask, HW)
        _store4(mid_o_ptr, mid_row * LORA, HALF, b0 * s, b1 * s, b2 * s, b3 * s, r_mask, HW)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(mid_lse_ptr + mid_row, lse, mask=r_mask)


TILES = ((64, 4), (32, 4), (64, 8))


def sass() -> None:
    import mla_decode_ptx
    from decode_ptx import loop_body_ops

    atom_kernel = mla_decode_ptx._mla_decode_kernel
    for bn, warps in TILES:
        for name, kern in (("atom", atom_kernel), ("prefetch", _prefetch_kernel)):
            mla_decode_ptx._mla_decode_kernel = kern
            k = mla_decode_ptx.mla_decode_kernel(True, 16, bn, warps, 1, True)
            n, ops = loop_body_ops(k.asm["cubin"])
            print(f"fp8 n{bn} w{warps} {name}: {n} instructions a thread per tile, "
                  f"{n * warps * 32 / (bn * 576):.2f} per element, smem {k.metadata.shared} B, "
                  f"{mla_decode_ptx.ptxas_usage(k.asm['ptx'])}", flush=True)
            print("   ", dict(ops.most_common(10)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.sass:
        sass()
        return
    from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case

    atom_kernel = mla_decode._mla_decode_kernel
    res: dict[str, float | bool] = {}
    for b, c in ((64, 1024), (64, 4096), (128, 1024), (128, 4096), (256, 4096), (256, 8192)):
        q, cache, meta, byts = _mla_decode_case(b, c, 16, torch.float8_e4m3fn)
        outs = {}
        for name, kern, tile in [("atom", atom_kernel, (None, None, None))] + [
                (f"prefetch_n{bn}_w{w}_sm{sm}", _prefetch_kernel, (bn, w, sm))
                for bn, w in TILES for sm in (1, 2, 4)]:
            mla_decode._mla_decode_kernel = kern
            out = torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda", dtype=torch.bfloat16)
            splits = None if tile[2] is None else mla_decode.num_splits(b, 1, q.device, tile[2])
            kw = dict(block_n=tile[0], num_warps=tile[1], splits=splits)
            try:
                ms = _graph_ms(lambda: mla_decode.mla_decode_attention(
                    q, cache, meta, R1_LATENT[0], 192 ** -0.5, 1.0, out=out, **kw))
            except Exception as ex:  # a tile that does not compile (registers, shared memory)
                res[f"b{b}_ctx{c}_{name}"] = type(ex).__name__
                continue
            finally:
                mla_decode._mla_decode_kernel = atom_kernel
            res[f"b{b}_ctx{c}_{name}"] = round(byts / (ms * 1e-3) / 1e12, 3)
            outs[name] = out
        ref = outs["atom"]
        for name, out in outs.items():
            if name != "atom":
                res[f"b{b}_ctx{c}_{name}_maxdiff"] = float((out.float() - ref.float()).abs().max())
        print(b, c, {k.split(f"ctx{c}_")[-1]: v for k, v in res.items()
                     if k.startswith(f"b{b}_ctx{c}_")}, flush=True)
        del q, cache
        torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
