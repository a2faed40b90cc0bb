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


def dot_dtype(dtype: torch.dtype):
    if os.environ.get("TRITON_INTERPRET") == "1":
        return tl.float32
    return _TL[dtype]


def dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dot_dtype(dtype) == tl.float32 else "tf32"
