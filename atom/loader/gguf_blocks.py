"""GGUF quantized blocks → QuantizedWeight (codes, per-group scales and zeros), without
dequantizing: the CPU kernels read the codes, and `QuantizedWeight.dequantize` reproduces what
`gguf.quants.dequantize` gives, bit for bit (tests/kernels/test_gguf_blocks.py).

Formats with 32-wide groups and one scale (and min) per group map directly; the K-quants' super
block scales are folded into per-group scales here (d * sc, and -dmin * m as the zero). Formats
not listed (Q2_K, Q3_K, the IQ family) are dequantized by the loader instead.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from atom.kernels.quantized_weight import QuantizedWeight

Decoded = tuple[np.ndarray, np.ndarray, Optional[np.ndarray], int, int, int]  # codes, scales, zeros, g, min, max


def _f16(b: np.ndarray) -> np.ndarray:
    return b.view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes → [n, 32] codes: low nibbles are elements 0-15, high nibbles 16-31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: a little-endian uint32 per block, bit i is element i's fifth bit."""
    bits = qh.copy().view(np.uint32).reshape(-1, 1) >> np.arange(32, dtype=np.uint32)
    return ((bits & 1).astype(np.uint8) << 4)


def _q4_0(b: np.ndarray) -> Decoded:
    return _nibbles(b[:, 2:]).astype(np.int8) - 8, _f16(b[:, :2]), None, 32, -8, 7


def _q4_1(b: np.ndarray) -> Decoded:
    return _nibbles(b[:, 4:]), _f16(b[:, :2]), _f16(b[:, 2:4]), 32, 0, 15


def _q5_0(b: np.ndarray) -> Decoded:
    q = (_nibbles(b[:, 6:]) | _high_bits(b[:, 2:6])).astype(np.int8) - 16
    return q, _f16(b[:, :2]), None, 32, -16, 15


def _q5_1(b: np.ndarray) -> Decoded:
    return _nibbles(b[:, 8:]) | _high_bits(b[:, 4:8]), _f16(b[:, :2]), _f16(b[:, 2:4]), 32, 0, 31


def _q8_0(b: np.ndarray) -> Decoded:
    return b[:, 2:].copy().view(np.int8), _f16(b[:, :2]), None, 32, -128, 127


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: per-group scale d * sc and zero -(dmin * m), [n, 8] each."""
    from gguf.quants import Q4_K

    d, dmin = _f16(b[:, :2]), _f16(b[:, 2:4])
    sc, m = Q4_K.get_scale_min(b[:, 4:16])
    return d * sc.astype(np.float32), -(dmin * m.astype(np.float32))


def _k_low(qs: np.ndarray) -> np.ndarray:
    """[n, 128] bytes → [n, 8, 32]: chunk j's low nibbles are group 2j, its high ones 2j + 1."""
    qs = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (qs & 0x0F).reshape(-1, 8, 32)


def _q4_k(b: np.ndarray) -> Decoded:
    scales, zeros = _k_scales(b)
    return _k_low(b[:, 16:]).reshape(-1, 256), scales, zeros, 32, 0, 15


def _q5_k(b: np.ndarray) -> Decoded:
    scales, zeros = _k_scales(b)
    qh = b[:, 16:48].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    q = _k_low(b[:, 48:]) | ((qh & 1) << 4)
    return q.reshape(-1, 256), scales, zeros, 32, 0, 31


def _q6_k(b: np.ndarray) -> Decoded:
    ql = b[:, :128].reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    q = ((ql & 0x0F).reshape(-1, 8, 32) | ((qh & 3).reshape(-1, 8, 32) << 4)).astype(np.int8) - 32
    scales = _f16(b[:, 208:210]) * b[:, 192:208].view(np.int8).astype(np.float32)
    return q.reshape(-1, 256), scales, None, 16, -32, 31


_DECODERS: dict[str, Callable[[np.ndarray], Decoded]] = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
    "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
}


def keeps_quantized(tensor_type: Any) -> bool:
    return tensor_type.name in _DECODERS


def decode(data: np.ndarray, tensor_type: Any, shape: tuple[int, int]) -> QuantizedWeight:
    """One GGUF tensor's raw blocks ([rows, bytes per row] uint8) as [N, K] codes and groups."""
    from gguf.constants import GGML_QUANT_SIZES

    n, k = shape
    _, type_size = GGML_QUANT_SIZES[tensor_type]
    codes, scales, zeros, g, lo, hi = _DECODERS[tensor_type.name](
        np.ascontiguousarray(data).reshape(-1, type_size))
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    return QuantizedWeight(f"gguf:{tensor_type.name}", t(codes.reshape(n, k)),
                           t(scales.reshape(n, k // g)),
                           None if zeros is None else t(zeros.reshape(n, k // g)), g, lo, hi)
