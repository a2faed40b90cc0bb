"""The sampler's, the decode attention's and the rejection sampler's kernels compile for sm_90
on this GPU-less machine.

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
        "_decode_kernel", "_decode_kernel", "_rejection_kernel", "_rejection_kernel"])
