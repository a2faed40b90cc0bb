"""The one-row GEMV's inner loop in SASS for sm_90, compiled on this (GPU-less) machine: its
instructions a weight element, by opcode, for an e4m3 weight and a bf16 one.

Why: the fp8 GEMV streams at 0.80 of a plain read's rate where the bf16 one, a byte for a byte,
does better; this shows where its work goes (e4m3 -> f16 by F2FP, one a pair; f16 -> f32 by
HADD2.F32, one an element; then the FFMA), the count NOTES and fp8_gemv_mma_probe.py cite.

    python research/probes/gemv_sass.py
"""
from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from atom.kernels.triton import fp8_gemv, gemv
from decode_ptx import loop_body_ops


def loop_ops(w_type: str) -> None:
    fp8 = w_type == "*fp8e4nv"
    ptrs = ("x_ptr", "w_ptr", "b_ptr", "y_ptr", "res_ptr", "norm_w_ptr", "res_out_ptr", "s_ptr")
    sig = {n: ("*fp32" if n == "s_ptr" else w_type if n == "w_ptr" else "*bf16") for n in ptrs}
    sig |= {n: "i32" for n in ("n_rows", "k_dim", "w_stride", "bs_stride")} | {"eps": "fp32"}
    # The 8B gate_up's tiles (28,672 x 4,096) as fp8_gemv / gemv choose them.
    bn, bk, nw = fp8_gemv._config(False, 28672, 4096) if fp8 else gemv._config(28672, 4096)
    consts = dict(HAS_BIAS=False, SILU_GATE=False, RMS_NORM=False, HAS_SCALE=fp8,
                  HAS_BLOCK_SCALE=False, HAS_RESIDUAL=False, BLOCK_N=bn, BLOCK_K=bk, PDL=True)
    sig |= {k: "constexpr" for k in consts}
    sig = {n: sig[n] for n in gemv._gemv_kernel.arg_names}
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if n.endswith("_ptr") or n in ("w_stride", "k_dim")}
    k = triton.compile(ASTSource(gemv._gemv_kernel, sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw))
    n, ops = loop_body_ops(k.asm["cubin"])
    elems = bn * bk / (nw * 32)  # weight elements a thread, a loop iteration
    print(f"{w_type}: tile {bn}x{bk}, {nw} warps: {n} instructions a thread an iteration, "
          f"{n / elems:.2f} an element; " + ", ".join(f"{op} {c / elems:.2f}"
                                                    for op, c in ops.most_common(6)))


if __name__ == "__main__":
    loop_ops("*fp8e4nv")
    loop_ops("*bf16")
