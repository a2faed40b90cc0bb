"""Fp8Weight: reading a checkpoint's scales, tensor-parallel shards and packed parts exactly, and
the fp8 GEMM path's operands (torch._scaled_mm runs on the CPU too) against the reference."""
from __future__ import annotations

import pytest
import torch

from atom.kernels import fp8_reference
from atom.kernels.fp8_linear import Fp8Kernels
from atom.kernels.fp8_weight import E4M3, cat_fp8_rows, from_checkpoint, quantize


def _codes(n: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=g) * 100).clamp(-448, 448).to(E4M3)


def test_per_tensor_and_per_channel_scales_dequantize_as_codes_times_scale():
    q = _codes(48, 32)
    tensor = from_checkpoint(q, torch.tensor([0.02], dtype=torch.bfloat16), None, block=False)
    torch.testing.assert_close(tensor.dequantize(), q.float() * torch.tensor(0.02).bfloat16().float(),
                               rtol=0, atol=0)
    s = torch.rand(48, 1) + 0.01
    torch.testing.assert_close(from_checkpoint(q, s, None, block=False).dequantize(),
                               q.float() * s, rtol=0, atol=0)


def test_block_scales_cover_partial_blocks():
    n, k = 200, 300  # 2 x 3 blocks, the last of each partial
    q, s = _codes(n, k), torch.rand(2, 3) + 0.01
    w = from_checkpoint(q, s, None, block=True)
    expect = q.float().clone()
    for i in range(2):
        for j in range(3):
            expect[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] *= s[i, j]
    torch.testing.assert_close(w.dequantize(), expect, rtol=0, atol=0)
    with pytest.raises(ValueError, match="block scales"):
        from_checkpoint(q, torch.rand(1, 3), None, block=True)


def test_parts_with_different_per_tensor_scales_concatenate_exactly():
    """q | k | v with one scale each become one matrix with a scale per row."""
    parts = [from_checkpoint(_codes(n, 32, i), torch.tensor([0.01 * (i + 1)]),
                             torch.tensor([0.5 + i]), block=False)
             for i, n in enumerate((64, 16, 16))]
    packed = cat_fp8_rows(parts)
    torch.testing.assert_close(packed.dequantize(), torch.cat([p.dequantize() for p in parts]),
                               rtol=0, atol=0)
    assert float(packed.input_scale) == 2.5  # the largest static scale: clips no part


def test_block_parts_concatenate_on_block_boundaries_only():
    a, b = quantize(torch.randn(128, 200), block=True), quantize(torch.randn(50, 200), block=True)
    packed = cat_fp8_rows([a, b])
    torch.testing.assert_close(packed.dequantize(), torch.cat([a.dequantize(), b.dequantize()]),
                               rtol=0, atol=0)
    with pytest.raises(ValueError, match="multiple of 128"):
        cat_fp8_rows([b, a])


@pytest.mark.parametrize("block", [False, True])
def test_shards_are_slices_of_the_dequantized_weight(block):
    w = quantize(torch.randn(384, 320), block=block)
    full = w.dequantize()
    for start, length in ((0, 256), (256, 128)):
        torch.testing.assert_close(w.rows(start, length).dequantize(),
                                   full[start:start + length], rtol=0, atol=0)
    for start, length in ((0, 128), (128, 192)):  # the last shard's block is partial
        torch.testing.assert_close(w.columns(start, length).dequantize(),
                                   full[:, start:start + length], rtol=0, atol=0)
    if block:
        with pytest.raises(ValueError, match="128-wide block"):
            w.rows(64, 128)


@pytest.mark.parametrize("block", [False, True])
def test_quantize_rounds_each_weight_within_e4m3s_step(block):
    """3 mantissa bits: a value is off by at most 2^-4 of itself, or half the smallest
    subnormal step (2^-10 of the scale) near zero."""
    w = torch.randn(256, 300)
    q = quantize(w, block=block)
    scale = q.scale_per_element()
    err = (q.dequantize() - w).abs()
    assert (err <= w.abs() * 2 ** -4 + scale * 2 ** -10 + 1e-12).all()


def test_per_group_and_per_token_quantization_agree_on_one_group():
    x = torch.randn(7, 128)
    c1, s1 = fp8_reference.quant_per_token(x)
    c2, s2 = fp8_reference.quant_per_group(x)
    assert torch.equal(c1.float(), c2.float()) and torch.equal(s1, s2)


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_scaled_mm_operands_give_the_reference(static, bias):
    """Layouts and scales of the cuBLASLt path (row-major x, the codes transposed, [M, 1] and
    [1, N] scales), on torch's CPU _scaled_mm; its CUDA numerics are tests/quant/test_fp8_gpu.py."""
    g = torch.Generator().manual_seed(3)
    w = quantize(torch.randn(96, 64, generator=g))
    if static:
        w.input_scale = torch.tensor(0.01)
    x = torch.randn(5, 64, generator=g).bfloat16()
    b = torch.randn(96, generator=g).bfloat16() if bias else None
    ours = Fp8Kernels(None, None, None).linear(x, w, b)
    ref = fp8_reference.fp8_linear(x, w, b)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours, ref, rtol=2 ** -7, atol=1e-2)


def test_row_counts_take_the_smallest_bucket_that_holds_them():
    from atom.kernels.fp8_choice import BUCKETS, bucket_of

    assert [bucket_of(r) for r in (17, 64, 65, 4096, 10**6)] == [64, 64, 256, 4096, BUCKETS[-1]]


@pytest.mark.parametrize("block", [False, True])
def test_a_prepared_shard_owns_its_storage(block):
    """A row-parallel shard is a view of the whole checkpoint tensor: what the backends keep
    must not hold the rest of it."""
    from atom.kernels.fp8_reference import EmulatedFp8Linear

    full = quantize(torch.randn(256, 512), block=block)
    shard = full.columns(256, 256)
    assert not shard.qweight.is_contiguous()
    kept = EmulatedFp8Linear.of(shard).fp8
    assert kept.qweight.is_contiguous()
    assert kept.qweight.untyped_storage().nbytes() == 256 * 256
    torch.testing.assert_close(kept.dequantize(), shard.dequantize(), rtol=0, atol=0)
