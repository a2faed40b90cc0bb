"""Do threads parallelise Triton compiles? Compiles four variants of atom's decode kernel for
sm_90 (no GPU needed) one after another, then on four threads, and prints the wall time of each.
On the 2-core dev machine, idle: 2.91-3.03 s one after another, 2.07-2.22 s on four threads
(1.4x on 2 cores: the compile releases the GIL for part of its work). Measured while other
processes kept both cores busy, the threaded run was the slower one (12.1 vs 10.8 s) — a
loaded machine tells nothing here.

    python research/probes/compile_threads.py seq
    python research/probes/compile_threads.py threads
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())  # every compile is a miss

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from atom.kernels.triton import paged_decode_attention as A  # noqa: E402

PTRS = ("q_ptr", "kc_ptr", "vc_ptr", "o_ptr", "mid_o_ptr", "mid_lse_ptr", "count_ptr", "ctx_ptr",
        "bt_ptr")
SIG = {n: ("*fp32" if n.startswith("mid") else "*i32" if n in ("count_ptr", "ctx_ptr", "bt_ptr")
           else "*bf16") for n in PTRS}
SIG |= {n: "i32" for n in ("q_tok_stride", "q_head_stride", "o_tok_stride", "o_head_stride",
                           "c_blk_stride", "c_tok_stride", "c_head_stride", "bt_stride", "window",
                           "head_dim", "n_q_heads", "n_splits")} | {"qk_scale": "fp32",
                                                                     "v_scale": "fp32"}


def compile_variant(i: int) -> float:
    consts = dict(GROUP=2, G_PAD=16, PAGE=16, BLOCK_N=64 if i % 2 else 128,
                  HEAD_DIM=128 if i < 2 else 64, SPLIT=bool(i % 2), SPLIT_PAD=A.MAX_SPLITS,
                  HAS_WINDOW=False, DOT=tl.bfloat16, PREC="tf32", PDL=False, E4M3_REGS=False)
    src = ASTSource(A._decode_kernel, dict(SIG) | {k: "constexpr" for k in consts},
                    constexprs=consts)
    t0 = time.perf_counter()
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    return time.perf_counter() - t0


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "seq"
    t0 = time.perf_counter()
    if mode == "seq":
        each = [compile_variant(i) for i in range(4)]
    else:
        with ThreadPoolExecutor(4) as ex:
            each = list(ex.map(compile_variant, range(4)))
    print(mode, round(time.perf_counter() - t0, 2), "s; each", [round(x, 2) for x in each])


if __name__ == "__main__":
    main()
