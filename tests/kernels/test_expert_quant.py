"""Expert weights to e4m3 and back: each channel's or block's largest magnitude is e4m3's 448,
and the round trip is within e4m3's half step (2^-4 relative) of every element."""
import pytest
import torch

from atom.kernels.expert_quant import dequantize_experts, quantize_experts


@pytest.mark.parametrize("block", [False, True], ids=["per_channel", "block_128"])
def test_round_trip_within_half_an_e4m3_step(block):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 256, 384, generator=g) * torch.rand(3, 256, 1, generator=g)
    codes, scale = quantize_experts(w.to(torch.bfloat16), block)
    assert codes.dtype == torch.float8_e4m3fn
    assert scale.shape == ((3, 2, 3) if block else (3, 256))
    back = dequantize_experts(codes, scale)
    wf = w.to(torch.bfloat16).float()
    # e4m3 keeps 3 mantissa bits: a normal value is off by at most 2^-4 of itself; values
    # below the smallest normal (2^-6 · scale) by at most half the subnormal step.
    sub = scale[..., None] if not block else scale.repeat_interleave(128, 1).repeat_interleave(128, 2)
    assert ((back - wf).abs() <= (wf.abs() * 2 ** -4).maximum(sub * 2 ** -10)).all()
    amax = codes.float().abs().amax(dim=-1) if not block else codes.float().abs().view(
        3, 2, 128, 3, 128).amax(dim=(2, 4))
    assert (amax == 448).all()


def test_a_zero_channel_stays_zero():
    w = torch.randn(2, 128, 128)
    w[1, 5] = 0
    codes, scale = quantize_experts(w, False)
    assert torch.isfinite(scale).all() and (codes[1, 5].float() == 0).all()
