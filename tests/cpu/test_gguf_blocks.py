"""GGUF blocks kept quantized: QuantizedWeight.dequantize equals gguf's own dequantize bit for
bit, for every format the loader keeps (blocks from gguf's quantizer where it has one, random
bytes with valid fp16 scales for the K-quants), and rows permute and stack like float rows."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

from atom.kernels.quantized_weight import cat_rows
from atom.loader.gguf_blocks import decode

N, K = 48, 512
# Offsets of each K-quant block's fp16 super-block scales (d, and dmin where there is one).
_K_SCALE_OFFSETS = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}


def _blocks(qt: T, rng: np.random.Generator) -> np.ndarray:
    if qt in _K_SCALE_OFFSETS:
        block, size = GGML_QUANT_SIZES[qt]
        b = rng.integers(0, 256, (N * K // block, size), dtype=np.uint8)
        for off in _K_SCALE_OFFSETS[qt]:
            d = (rng.random(b.shape[0]) * 0.01 + 1e-3).astype(np.float16)
            b[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
        return b.reshape(N, -1)
    return quantize(rng.standard_normal((N, K)).astype(np.float32), qt)


@pytest.mark.parametrize("qt", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K],
                         ids=lambda t: t.name)
def test_dequantize_is_gguf_bit_for_bit(qt):
    data = _blocks(qt, np.random.default_rng(int(qt)))
    qw = decode(data, qt, (N, K))
    ref = dequantize(data, qt)
    assert np.array_equal(qw.dequantize().numpy(), ref)
    codes = qw.codes.int()
    assert qw.code_min <= int(codes.min()) and int(codes.max()) <= qw.code_max


def test_rows_permute_and_stack_like_float_rows():
    rng = np.random.default_rng(1)
    a = decode(_blocks(T.Q4_K, rng), T.Q4_K, (N, K))
    b = decode(_blocks(T.Q6_K, rng), T.Q6_K, (N, K))  # group 16, signed: a Q4_K_M's v
    order = torch.randperm(N)
    assert torch.equal(a.permute_rows(order).dequantize(), a.dequantize()[order])
    both = cat_rows([a, b])
    assert both.group_size == 16 and (both.code_min, both.code_max) == (-32, 31)
    assert torch.equal(both.dequantize(), torch.cat([a.dequantize(), b.dequantize()]))
    assert torch.equal(both.columns(32, 64).dequantize(), both.dequantize()[:, 32:96])
