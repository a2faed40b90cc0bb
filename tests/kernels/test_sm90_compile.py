"""The sampler's, the decode attention's and the fp8 weight kernels compile for sm_90 on this GPU-less machine.

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

def compile_sm90(fn, sig, consts, warps):
    sig = dict(sig) | {k: "constexpr" for k in consts}
    src = ASTSource(fn, sig, constexprs=consts)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps)).asm["ptx"]
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
ptrs = ("q_ptr", "kc_ptr", "vc_ptr", "o_ptr", "mid_o_ptr", "mid_lse_ptr", "count_ptr", "ctx_ptr", "bt_ptr")
decode = {n: ("*fp32" if n.startswith("mid") else "*i32" if n in ("count_ptr", "ctx_ptr", "bt_ptr")
              else "*bf16") for n in ptrs}
decode |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                              "c_blk_stride", "c_tok_stride", "c_head_stride", "bt_stride", "window",
                              "head_dim", "n_q_heads", "n_splits")} | {"qk_scale": "fp32", "v_scale": "fp32"}
for split in (False, True):  # the kernel's two variants: every split count > 1 shares one
    compile_sm90(A._decode_kernel, decode, dict(
        GROUP=2, G_PAD=16, PAGE=16, BLOCK_N=64 if split else 128, HEAD_DIM=128, SPLIT=split,
        SPLIT_PAD=A.MAX_SPLITS, HAS_WINDOW=False, DOT=tl.bfloat16, PREC="tf32", PDL=False,
        E4M3_PAIRS=False), 4)

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
compile_sm90_div16(FQ._per_token_kernel, q_sig, dict(BLOCK=4096, PDL=True), 8,
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
# The one-row path: gemv.py's kernel on an e4m3 weight with its row scales.
from atom.kernels.triton import gemv as GV
one = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "b_ptr": "*bf16", "y_ptr": "*bf16", "n_rows": "i32",
       "k_dim": "i32", "w_stride": "i32", "res_ptr": "*bf16", "norm_w_ptr": "*bf16",
       "res_out_ptr": "*bf16", "eps": "fp32", "s_ptr": "*fp32"}
bn, bk, nw = FG._config(False, 4096, 4096)
ptx = compile_sm90_div16(GV._gemv_kernel, one, dict(
    HAS_BIAS=False, SILU_GATE=False, RMS_NORM=False, HAS_SCALE=True, HAS_RESIDUAL=False,
    BLOCK_N=bn, BLOCK_K=bk, PDL=True), nw,
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
    # decode: split along K (x quantised in the K loop by the block GEMM); prefill: neither
    for rows, split in ((64, True), (4096, False)):
        bm, bn, nw, ns = FT.tile_config(rows)
        quant = dict(QUANT_X=split, X_EPS=1e-10) if kernel is FB._block_gemm_kernel else {}
        sig = b_sig | ({"a_ptr": "*bf16"} if quant.get("QUANT_X") else {})
        ptx = compile_sm90_div16(kernel, sig, dict(
            HAS_BIAS=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=8, SPLIT=split, PDL=True)
            | quant, nw, ns, div16=b_div)
        assert re.search(r"wgmma\.mma_async[a-zA-Z0-9._]*e4m3\.e4m3", ptx), "not an fp8 wgmma"
        if kernel is FS._scaled_gemm_kernel:
            # Promotion every 128 products: one fp32 add per accumulator element and K step.
            assert len(re.findall(r"add\.f32", ptx)) >= bm * bn // (32 * nw), "fp8 dot not promoted"
compile_sm90_div16(SK._sum_slices_kernel, {"part_ptr": "*fp32", "bias_ptr": "*bf16", "c_ptr": "*bf16",
                                           "n_elems": "i32", "n_cols": "i32", "c_stride": "i32",
                                           "n_slices": "i32"},
                   dict(HAS_BIAS=True, BLOCK=1024, PDL=True), 4, div16=("part_ptr", "bias_ptr", "c_ptr"))
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
        "_decode_kernel", "_decode_kernel", "_per_token_kernel", "_per_group_kernel"]
        + ["_rms_norm_quant_kernel"] * 2
        + ["_fp8_gemv_kernel", "_gemv_kernel"] + ["_block_gemm_kernel"] * 2 + ["_scaled_gemm_kernel"] * 2
        + ["_sum_slices_kernel"])
