"""Which operand dtype attention's `tl.dot` runs in.

On the GPU: the activation dtype (bf16/fp16 tensor cores), with fp32 inputs kept in IEEE fp32 so
the fp32 path stays an exact check. Under TRITON_INTERPRET=1 the interpreter's dot mishandles
bf16 operands (triton 3.9 returns garbage), so every dot is done in fp32 there.
"""
from __future__ import annotations

import os

import torch
import triton.language as tl

_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def interpreted() -> bool:
    """TRITON_INTERPRET=1: kernels run in numpy, without inline PTX or bf16 dots."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def dot_dtype(dtype: torch.dtype, kv_dtype: torch.dtype | None = None):
    """An fp8 cache is read into fp16, not bf16: e4m3 → f16 is one instruction on Hopper and
    exact, e4m3 → bf16 goes through f32 and made the fp8 kernels slower than bf16 ones (1.7 vs
    4.1 TB/s on the H200). q then goes to fp16 too (more mantissa than bf16; post-norm q is far from
    fp16's 65504 limit)."""
    if interpreted():
        return tl.float32
    if kv_dtype == torch.float8_e4m3fn and dtype in (torch.bfloat16, torch.float16):
        return tl.float16
    return _TL[dtype]


def dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dot_dtype(dtype) == tl.float32 else "tf32"
