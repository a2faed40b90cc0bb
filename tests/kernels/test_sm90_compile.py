"""The sampler's, the decode and multi-query attention's, the MLA, fused-MoE, fp8 weight and rejection-sampler
kernels compile for sm_90 on this GPU-less machine.

Why: TRITON_INTERPRET runs a kernel as numpy and skips the compiler's checks, so a kernel can
pass every CPU test and fail to compile on the H200 (a loop-carried variable that changed type
did, run 27). Compiled here in a child process without TRITON_INTERPRET (the kernels under test
were decorated for the interpreter), up to PTX and cubin with Triton's bundled tools.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

CHILD = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from atom.kernels.triton import sampling as S

def compile_sm90(fn, sig, consts, warps, stages=3):
    sig = dict(sig) | {k: "constexpr" for k in consts}
    src = ASTSource(fn, sig, constexprs=consts)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options=dict(num_warps=warps, num_stages=stages)).asm["ptx"]
    print(fn.__name__, len(ptx))

row = {"logits_ptr": "*bf16", "temp_ptr": "*fp32", "seed_ptr": "*i64", "logits_stride": "i32",
       "vocab": "i32"}
compile_sm90(S._sample_filtered_kernel, row | {"out_ptr": "*i64", "top_k_ptr": "*i32", "top_p_ptr": "*fp32"},
             dict(MAX_ROUNDS=S.MAX_ROUNDS, BLOCK=S.BLOCK), 8)
compile_sm90(S._sample_chunks_kernel, row | {"best_ptr": "*fp32", "best_i_ptr": "*i32"},
             dict(CHUNK=S.CHUNK, BLOCK=S.BLOCK), 4)
compile_sm90(S._sample_pick_kernel, {"best_ptr": "*fp32", "best_i_ptr": "*i32", "out_ptr": "*i64",
                              "chunks": "i32", "vocab": "i32"}, dict(CHUNKS_PAD=16), 1)

import triton.language as tl
from atom.kernels.triton import paged_decode_attention as A
ptrs = ("q_ptr", "kc_ptr", "vc_ptr", "o_ptr", "mid_o_ptr", "mid_lse_ptr", "ctx_ptr", "bt_ptr")
decode = {n: ("*fp32" if n.startswith("mid") else "*i32" if n in ("ctx_ptr", "bt_ptr")
              else "*bf16") for n in ptrs}
decode |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                              "c_blk_stride", "c_tok_stride", "c_head_stride", "bt_stride", "window",
                              "head_dim", "n_q_heads", "n_splits")} | {"qk_scale": "fp32", "v_scale": "fp32"}
for split in (False, True):  # the kernel's two variants: every split count > 1 shares one
    compile_sm90(A._decode_kernel, decode, dict(
        GROUP=2, G_PAD=16, PAGE=16, BLOCK_N=64 if split else 128, HEAD_DIM=128, SPLIT=split,
        HAS_WINDOW=False, DOT=tl.bfloat16, PREC="tf32", PDL=False, E4M3_REGS=False), 4)
compile_sm90(A._decode_merge_kernel, {"mid_o_ptr": "*fp32", "mid_lse_ptr": "*fp32",
             "o_ptr": "*bf16", "v_scale": "fp32"} | {n: "i32" for n in (
             "o_tok_stride", "o_head_stride", "n_q_heads", "head_dim", "n_splits")},
             dict(SPLIT_PAD=A.MAX_SPLITS, HEAD_DIM=128, PDL=True), 4)

from atom.kernels.triton import paged_multi_query_attention as MQ
mq = {n: ("*fp32" if n.startswith("mid") else "*i32" if n in ("cu_q_ptr", "ctx_ptr", "bt_ptr")
          else "*bf16") for n in ("q_ptr", "kc_ptr", "vc_ptr", "o_ptr", "mid_o_ptr", "mid_lse_ptr",
                                  "cu_q_ptr", "ctx_ptr", "bt_ptr")}
mq |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                          "c_blk_stride", "c_tok_stride", "c_head_stride", "bt_stride", "window",
                          "head_dim", "n_q_heads", "n_splits")} | {"qk_scale": "fp32", "v_scale": "fp32"}
# Llama-3-8B at k = 7 (8 queries x 4 heads) split, Qwen3-0.6B at k = 1 unsplit, an fp8 cache
for g_pad, q_pad, split, kv, dot in ((4, 8, True, "*bf16", tl.bfloat16),
                                     (2, 2, False, "*bf16", tl.bfloat16),
                                     (4, 4, True, "*fp8e4nv", tl.float16)):
    compile_sm90(MQ._multi_query_kernel, mq | {"kc_ptr": kv, "vc_ptr": kv}, dict(
        GROUP=g_pad, G_PAD=g_pad, Q_PAD=q_pad, ROWS=max(16, g_pad * q_pad), PAGE=16, BLOCK_N=64,
        HEAD_DIM=128, SPLIT=split, HAS_WINDOW=False, DOT=dot, PREC="tf32"), 4)
compile_sm90(MQ._multi_query_merge_kernel, {"mid_o_ptr": "*fp32", "mid_lse_ptr": "*fp32", "o_ptr": "*bf16",
             "v_scale": "fp32"} | {n: "i32" for n in ("o_tok_stride", "o_head_stride", "n_q_heads",
                                                      "head_dim", "n_splits")},
             dict(GROUP=4, SPLIT_PAD=MQ.MAX_SPLITS, HEAD_DIM=128), 4)

from atom.kernels.triton import fused_moe as M
moe = {"sorted_ptr": "*i32", "block_expert_ptr": "*i32", "weight_ptr": "*fp32",
       "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32"}
moe |= {n: "i32" for n in ("pairs", "n_out", "k_dim", "a_stride", "b_stride_e", "b_stride_n",
                           "c_stride", "as_stride", "bs_stride_e", "bs_stride_n")}
# bf16, then fp8 per-channel (1) and block-scaled (2): mma.sync at 16-row blocks, wgmma at 64;
# gate|up with SiLU-and-mul, and down with the router weight.
for quant in (0, 1, 2):
    ab = "*bf16" if quant == 0 else "*fp8e4nv"
    for cfg in (M.DECODE, M.PREFILL):
        for gated in (True, False):
            compile_sm90(M._moe_gemm_kernel, moe | {"a_ptr": ab, "b_ptr": ab, "c_ptr": "*bf16"},
                         dict(ROW_DIV=8 if gated else 1, GATED=gated, ROUTED=not gated,
                              QUANT=quant, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                              BLOCK_K=M.SCALE_BLOCK if quant == 2 else cfg.block_k,
                              GROUP=M.GROUP_M, PREC="tf32", PDL=False,
                              DOT=tl.bfloat16 if quant == 0 else tl.float8e4nv), cfg.num_warps)

from atom.kernels.triton import moe_align as MA
align = {"experts_ptr": "*i64", "sorted_ptr": "*i32", "block_expert_ptr": "*i32",
         "pairs": "i32", "num_experts": "i32"}
for bins in (16, 512):  # 8 experts and R1's 256
    count = align | {"counts_ptr": "*i32", "cap": "i32", "num_blocks": "i32"}
    compile_sm90(MA._count_kernel, count, dict(CHUNK=MA.CHUNK, BINS=bins, FILL=MA.FILL), 4)
    compile_sm90(MA._offsets_kernel, {"counts_ptr": "*i32", "chunks": "i32", "num_experts": "i32"},
                 dict(BLOCK_M=16, BINS=bins, ROWS=MA.OFFSET_TILE // bins), 8)
    compile_sm90(MA._scatter_kernel, align | {"offsets_ptr": "*i32"},
                 dict(BLOCK_M=64, CHUNK=MA.CHUNK, TILE=MA.TILE, BINS=bins), 4)
from atom.kernels.triton import mla_decode as MD, mla_prefill as MP, mla_rope_store as MR
i32 = lambda *names: {n: "i32" for n in names}
mla = {n: ("*fp32" if n.startswith("mid") else "*i32" if n in ("cu_q_ptr", "ctx_ptr", "bt_ptr")
           else "*bf16") for n in ("q_ptr", "c_ptr", "o_ptr", "mid_o_ptr", "mid_lse_ptr",
                                   "cu_q_ptr", "ctx_ptr", "bt_ptr")}
mla |= i32("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride", "c_blk_stride",
           "c_tok_stride", "bt_stride", "n_heads", "n_splits")
mla |= {"qk_scale": "fp32", "kv_scale": "fp32"}
for fp8, rows, split, dot, one_wave in (
        (False, 16, False, tl.bfloat16, False), (False, 16, True, tl.bfloat16, True),
        (False, 32, True, tl.bfloat16, False), (False, 64, True, tl.bfloat16, False),
        (True, 16, True, tl.float16, False), (True, 64, False, tl.float16, False),
        (True, 16, False, tl.float32, False)):  # the last: an fp32 model
    block_n, warps, stages, _ = MD.tile_defaults(rows, fp8, one_wave)
    compile_sm90(MD._mla_decode_kernel, mla | ({"c_ptr": "*fp8e4nv"} if fp8 else {}), dict(
        L=512, R=64, HEADS=rows, M=rows, PAGE=64, BLOCK_N=block_n, LORA=512,
        ROPE=64, SPLIT=split, DOT=dot, PREC="ieee" if dot == tl.float32 else "tf32", PDL=False,
        E4M3_REGS=fp8), warps, stages)
compile_sm90(MD._mla_merge_kernel, {"mid_o_ptr": "*fp32", "mid_lse_ptr": "*fp32", "o_ptr": "*bf16",
             "kv_scale": "fp32"} | i32("o_tok_stride", "o_head_stride", "n_heads", "n_splits"),
             dict(L=512, SPLIT_PAD=MD.MAX_SPLITS, CHUNK=MD.MERGE_CHUNK, LORA=512, PDL=False), 4)
compile_sm90(MR._mla_rope_store_kernel, {"pos_ptr": "*i64", "slot_ptr": "*i64", "q_ptr": "*bf16",
             "k_ptr": "*bf16", "kv_ptr": "*bf16", "qo_ptr": "*bf16", "c_ptr": "*fp8e4nv",
             "cs_ptr": "*bf16", "kv_scale": "fp32"} | i32("q_tok_stride", "q_head_stride",
             "k_tok_stride", "kv_tok_stride", "c_slot_stride", "cs_stride", "n_heads", "half", "lora"),
             dict(IS_NEOX=False, QUANT=True, HEADS=128, HALF=32, LORA=512, PDL=False), 4)
compile_sm90(MP._gather_latents_kernel, {"c_ptr": "*fp8e4nv", "out_ptr": "*bf16", "ctx_ptr": "*i32",
             "cu_ctx_ptr": "*i32", "bt_ptr": "*i32", "kv_scale": "fp32"} | i32(
             "c_blk_stride", "c_tok_stride", "bt_stride", "first_seq", "k0"),
             dict(W=576, PAGE=64, BLOCK=32, CHUNK=64, DEQUANT=True), 4)
for merge in (False, True):  # one pass, or several merged by log-sum-exp
    compile_sm90(MP._mla_prefill_kernel, {"q_ptr": "*bf16", "kv_ptr": "*bf16", "lat_ptr": "*bf16",
                 "o_ptr": "*fp32" if merge else "*bf16", "lse_ptr": "*fp32" if merge else "*bf16",
                 "cu_q_ptr": "*i32", "ctx_ptr": "*i32", "cu_ctx_ptr": "*i32", "qk_scale": "fp32"}
                 | i32("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                       "kv_tok_stride", "lat_tok_stride", "n_heads", "first_seq", "k0"),
                 dict(N=128, R=64, V=128, L=512, NOPE=128, ROPE=64, V_DIM=128, BLOCK_M=64,
                      BLOCK_N=64, MERGE=merge, DOT=tl.bfloat16, PREC="tf32"), 8)
# fp8 kernels, with the divisibility-by-16 the launch gives pointers, strides and K (their PTX
# properties are checked too: a one-byte global load or an fp8 dot that is not an fp8 MMA would
# cost their bandwidth or their FLOPs and pass every CPU test).
import re
from atom.kernels.triton import fp8_block_gemm as FB, fp8_gemv as FG, fp8_quant as FQ

def compile_sm90_div16(fn, sig, consts, warps, stages=3, div16=()):
    names = list(sig) + list(consts)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = ASTSource(fn, dict(sig) | {k: "constexpr" for k in consts}, constexprs=consts, attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options=dict(num_warps=warps, num_stages=stages)).asm["ptx"]
    print(fn.__name__, len(ptx))
    assert not re.search(r"ld\.global[a-zA-Z0-9:._]*\.[bu]8", ptx), fn.__name__ + ": byte-wise load"
    return ptx

q_sig = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "k_dim": "i32", "x_stride": "i32",
         "q_stride": "i32", "eps": "fp32"}
for silu in (False, True):  # plain rows, and the [gate | up] rows of silu_mul_quant
    compile_sm90_div16(FQ._per_token_kernel, q_sig, dict(BLOCK=16384, SILU=silu, PDL=True), 16,
                       div16=("x_ptr", "q_ptr", "s_ptr", "k_dim", "x_stride", "q_stride"))
g_sig = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "k_dim": "i32", "n_groups": "i32",
         "x_stride": "i32", "q_stride": "i32", "s_stride": "i32", "eps": "fp32"}
compile_sm90_div16(FQ._per_group_kernel, g_sig, dict(GROUP=128, GROUPS=8, PDL=True), 4,
                   div16=("x_ptr", "q_ptr", "s_ptr", "k_dim", "x_stride", "q_stride"))
n_sig = {"x_ptr": "*bf16", "res_ptr": "*bf16", "w_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32",
         "res_out_ptr": "*bf16"} | {n: "i32" for n in ("x_stride", "res_stride", "q_stride", "s_stride",
                                                      "res_out_stride", "n_cols")}
n_sig |= {"eps": "fp32", "q_eps": "fp32"}
for group in (128, 8192):  # per group of 128, per token (one group: the row)
    compile_sm90_div16(FQ._rms_norm_quant_kernel, n_sig, dict(
        GROUP=group, HAS_RESIDUAL=True, BLOCK=8192, PDL=True), 16,
        div16=[n for n in n_sig if n.endswith("_ptr")] + ["x_stride", "res_stride", "q_stride"])
gemv_sig = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*bf16",
            "m_rows": "i32", "n_rows": "i32", "k_dim": "i32", "x_stride": "i32", "w_stride": "i32",
            "y_stride": "i32"}
bn, bk, nw = FG._config(True, 4096, 4096)
ptx = compile_sm90_div16(FG._fp8_gemv_kernel, gemv_sig, dict(
    HAS_BIAS=False, M_PAD=FG.M_PAD, BLOCK_N=bn, BLOCK_K=bk, PDL=True), nw,
    div16=("x_ptr", "w_ptr", "s_ptr", "b_ptr", "y_ptr", "k_dim", "x_stride", "w_stride"))
assert re.search(r"cp\.async\.cg\.shared\.global", ptx), "fp8_gemv: no 16-byte weight copies"
assert "cvt.rn.f16x2.e4m3x2" in ptx
# The W8A8 GEMV: weight rows as wgmma's M, x's 16 rows as its N, fed from shared memory.
from atom.kernels.triton import fp8_mma_gemv as FM
mma_sig = {"xq_ptr": "*fp8e4nv", "xs_ptr": "*fp32", "w_ptr": "*fp8e4nv", "ws_ptr": "*fp32",
           "b_ptr": "*fp32", "y_ptr": "*bf16", "part_ptr": "*fp32", "count_ptr": "*i32"}
mma_sig |= {n: "i32" for n in ("m_rows", "n_rows", "k_dim", "k_slice", "n_slices", "x_stride",
                               "w_stride", "y_stride")}
for split in (False, True):  # one slice (wide weights), K slices summed by the last (narrow)
    ptx = compile_sm90_div16(FM._mma_gemv_kernel, mma_sig, dict(
        HAS_BIAS=False, M_PAD=FM.M_PAD, BLOCK_N=FM.BLOCK_N, BLOCK_K=FM.BLOCK_K, SPLIT=split,
        PDL=True), FM.NUM_WARPS, FM.NUM_STAGES, div16=[n for n in mma_sig if n.endswith("_ptr")]
        + ["n_rows", "k_dim", "k_slice", "x_stride", "w_stride"])
    assert "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3" in ptx, "no e4m3 wgmma"
    assert "cvt.rn.f16x2.e4m3x2" not in ptx, "fp8_mma_gemv: converts its weight"
# The one-row path: gemv.py's kernel on an e4m3 weight with its row scales.
from atom.kernels.triton import gemv as GV
one = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "b_ptr": "*bf16", "y_ptr": "*bf16", "n_rows": "i32",
       "k_dim": "i32", "w_stride": "i32", "res_ptr": "*bf16", "norm_w_ptr": "*bf16",
       "res_out_ptr": "*bf16", "eps": "fp32", "s_ptr": "*fp32", "bs_stride": "i32"}
bn, bk, nw = FG._config(False, 4096, 4096)
for block in (False, True):  # per-row scales; 128 x 128 block scales taken into x
    ptx = compile_sm90_div16(GV._gemv_kernel, one, dict(
        HAS_BIAS=False, SILU_GATE=False, RMS_NORM=False, HAS_SCALE=not block,
        HAS_BLOCK_SCALE=block, HAS_RESIDUAL=False, BLOCK_N=bn, BLOCK_K=bk, PDL=True), nw,
        div16=[n for n in one if n.endswith("_ptr")] + ["k_dim", "w_stride"])
    assert re.search(r"ld\.global\.L1::evict_first[a-zA-Z0-9:._]*\.v4", ptx), "gemv: narrow fp8 loads"
    assert "cvt.rn.f16x2.e4m3x2" in ptx
b_sig = {n: "*fp8e4nv" if n in ("a_ptr", "b_ptr") else "*fp32"
         for n in ("a_ptr", "as_ptr", "b_ptr", "bs_ptr", "bias_ptr")} | {"c_ptr": "*bf16", "part_ptr": "*fp32"}
b_sig |= {n: "i32" for n in ("m_rows", "n_rows", "k_dim", "a_stride", "as_stride", "b_stride",
                             "bs_stride", "c_stride", "kb_per_slice")}
b_div = [n for n in b_sig if n.endswith("_ptr") or n in ("k_dim", "a_stride", "b_stride", "c_stride")]
from atom.kernels.triton import fp8_scaled_gemm as FS, fp8_tiles as FT, split_k as SK
for kernel in (FB._block_gemm_kernel, FS._scaled_gemm_kernel):
    # decode: split along K; prefill: not
    for rows, split in ((64, True), (4096, False)):
        bm, bn, nw, ns = FT.tile_config(rows)
        ptx = compile_sm90_div16(kernel, b_sig, dict(
            HAS_BIAS=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=8, SPLIT=split, PDL=True),
            nw, ns, div16=b_div)
        assert re.search(r"wgmma\.mma_async[a-zA-Z0-9._]*e4m3\.e4m3", ptx), "not an fp8 wgmma"
        if kernel is FS._scaled_gemm_kernel:
            # Promotion every 128 products: one fp32 add per accumulator element and K step.
            assert len(re.findall(r"add\.f32", ptx)) >= bm * bn // (32 * nw), "fp8 dot not promoted"
compile_sm90_div16(SK._sum_slices_kernel, {"part_ptr": "*fp32", "bias_ptr": "*bf16", "c_ptr": "*bf16",
                                           "n_elems": "i32", "n_cols": "i32", "c_stride": "i32",
                                           "n_slices": "i32"},
                   dict(HAS_BIAS=True, BLOCK=1024, PDL=True), 4, div16=("part_ptr", "bias_ptr", "c_ptr"))

from atom.kernels.triton import rejection_sampler as R
rej = {"p_ptr": "*fp32", "q_ptr": "*fp32", "draft_ptr": "*i64", "start_ptr": "*i32",
       "count_ptr": "*i32", "u_ptr": "*fp32", "noise_ptr": "*fp32", "out_ptr": "*i64", "vocab": "i32"}
for has_q in (True, False):
    compile_sm90(R._rejection_kernel, rej, dict(HAS_Q=has_q, BLOCK=R.BLOCK), 4)
"""


def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(line.split()[0] for line in p.stdout.splitlines()) == sorted([
        "_sample_filtered_kernel", "_sample_chunks_kernel", "_sample_pick_kernel",
        "_decode_kernel", "_decode_kernel", "_decode_merge_kernel", *["_multi_query_kernel"] * 3,
        "_multi_query_merge_kernel", *["_moe_gemm_kernel"] * 12,
        *["_count_kernel", "_offsets_kernel", "_scatter_kernel"] * 2, *["_mla_decode_kernel"] * 7,
        "_mla_merge_kernel", "_mla_rope_store_kernel",
        "_gather_latents_kernel", "_mla_prefill_kernel", "_mla_prefill_kernel",
        "_per_token_kernel", "_per_token_kernel", "_per_group_kernel"]
        + ["_rms_norm_quant_kernel"] * 2
        + ["_fp8_gemv_kernel"] + ["_mma_gemv_kernel"] * 2 + ["_gemv_kernel"] * 2 + ["_block_gemm_kernel"] * 2 + ["_scaled_gemm_kernel"] * 2
        + ["_sum_slices_kernel"] + ["_rejection_kernel"] * 2)
