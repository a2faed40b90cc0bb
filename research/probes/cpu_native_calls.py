"""What one call of each of the cpu backend's C kernels costs at SmolLM2's decode sizes (576
hidden, 9 query / 3 KV heads of 64, 1,536 intermediate), and a bare ctypes call and two torch
ops for scale: the figures cpu_native.py and NOTES ("The CPU path", "The C seams") quote.

    python research/probes/cpu_native_calls.py
"""
from __future__ import annotations

import ctypes
import time
from typing import Callable

import torch

from atom.kernels import cpu_native


def us(fn: Callable[[], object], n: int = 3000) -> float:
    for _ in range(100):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    torch.set_num_threads(1)
    nat = cpu_native.load()
    assert nat is not None, "no C compiler here"
    x, res, w = torch.randn(1, 576), torch.randn(1, 576), torch.rand(576)
    xw = torch.empty(1, 576, dtype=torch.bfloat16)
    y, r = torch.randn(1, 3072).bfloat16(), torch.rand(1)
    g, act = torch.randn(1, 3072), torch.empty(1, 1536, dtype=torch.bfloat16)
    q = torch.randn(1, 960).view(1, 15, 64)
    kc, vc = torch.zeros(100, 16, 3, 64), torch.zeros(100, 16, 3, 64)
    pos, cs, slots = torch.tensor([100]), torch.randn(2048, 64), torch.tensor([17])
    rows = [("norm_bf16, 1 x 576", lambda: nat.norm_bf16(x, res, w, 1e-5, xw)),
            ("scale_rows, 1 x 3072", lambda: nat.scale_rows(y, r, None)),
            ("silu_mul_bf16, 1 x 1536", lambda: nat.silu_mul_bf16(g, act)),
            ("rope_store, 1 row", lambda: nat.rope_store(q, 960, 1, 9, 3, 64, pos, cs, slots,
                                                         kc.view(-1, 3, 64),
                                                         vc.view(-1, 3, 64)))]
    for seqs in (1, 8):
        for ctx in (16, 128, 512):
            qq = torch.randn(seqs, 9, 64)
            bt = torch.arange(0, 64, dtype=torch.int32).repeat(seqs, 1)
            cl = torch.full((seqs,), ctx, dtype=torch.int32)
            rows.append((f"decode_attention, {seqs} seq x {ctx} keys",
                         lambda qq=qq, bt=bt, cl=cl: nat.decode_attention(qq, kc, vc, bt, cl,
                                                                          0.125, 0)))
    libc = ctypes.CDLL(None)
    libc.labs.argtypes, libc.labs.restype = [ctypes.c_long], ctypes.c_long
    rows += [("ctypes call of libc labs, 1 argument", lambda: libc.labs(-3)),
             ("torch.mul of 576 floats", lambda: torch.mul(x, x)),
             ("torch.empty(1, 576)", lambda: torch.empty(1, 576))]
    for name, fn in rows:
        print(f"{name:40s} {us(fn):7.2f} us")


if __name__ == "__main__":
    main()
