"""The online fp8 quantizer (fp8_weight.quantize): scales that are amax / 448 correctly rounded,
codes that are the nearest e4m3 value (ties to even), and the same bytes on the GPU as on the
CPU, so the torch backend's emulation computes what the GPU kernels compute."""
from __future__ import annotations

import pytest
import torch

from atom.kernels.fp8_weight import E4M3, E4M3_MAX, quantize

_E4M3_VALUES = torch.arange(256, dtype=torch.uint8).view(E4M3).float()
_FINITE = torch.unique(_E4M3_VALUES[~torch.isnan(_E4M3_VALUES)])  # sorted, -448 .. 448


def _weight(n: int, k: int, seed: int = 0) -> torch.Tensor:
    """Llama-like rows: small Gaussian values and a few outliers 20x larger, which put part of
    each row into e4m3's subnormals."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.02
    hot = torch.rand(n, k, generator=g) < 1e-3
    return torch.where(hot, w * 20, w)


def test_scales_are_amax_over_448_correctly_rounded():
    """Against float64's quotient rounded once: the multiply by float32(1 / 448) is off by an ulp
    for about half of these rows."""
    w = _weight(4096, 64)
    amax = w.abs().amax(dim=1)
    want = (amax.double() / E4M3_MAX).float()
    assert (amax * torch.tensor(1 / E4M3_MAX) != want).any()
    assert torch.equal(quantize(w).weight_scale, want)


@pytest.mark.parametrize("block", [False, True])
def test_codes_are_the_nearest_e4m3_value_ties_to_even(block):
    w = _weight(256, 384, seed=1)
    # row 0: every midpoint between neighbouring positive e4m3 values, under the scale 2^-8
    # (its amax is 448 * 2^-8), so the quotients are exact ties
    mids = (_FINITE[_FINITE >= 0][:-1] + _FINITE[_FINITE >= 0][1:]) / 2
    w[:128] = 0  # the first block row holds only row 0
    w[0, :len(mids)] = mids * 2 ** -8
    w[0, 127] = E4M3_MAX * 2 ** -8  # inside the first 128 x 128 block too
    q = quantize(w, block=block)
    x = w / q.scale_per_element()  # what the quantizer rounds (its division, as it computes it)
    codes = q.qweight.float()
    idx = torch.searchsorted(_FINITE, x.clamp(-E4M3_MAX, E4M3_MAX).contiguous())
    lo, hi = _FINITE[(idx - 1).clamp(min=0)], _FINITE[idx.clamp(max=len(_FINITE) - 1)]
    d_lo, d_hi = (x - lo).abs(), (hi - x).abs()
    nearest = torch.where(d_lo < d_hi, lo, hi)
    tie = d_lo == d_hi
    assert tie[0, :len(mids)].all()
    even = torch.where((lo.to(E4M3).view(torch.uint8) & 1) == 0, lo, hi)
    assert torch.equal(codes, torch.where(tie, even, nearest))


@pytest.mark.gpu
@pytest.mark.parametrize("block", [False, True])
def test_the_gpu_quantizes_to_the_cpus_codes_and_scales(block):
    """At 8B's down projection (4096 x 14336): online quantization runs on the GPU at load, the
    torch backend's emulation on the CPU; both must hold the same weight."""
    w = _weight(4096, 14336, seed=2).to(torch.bfloat16)
    cpu, gpu = quantize(w, block=block), quantize(w.cuda(), block=block)
    assert torch.equal(gpu.qweight.cpu().view(torch.uint8), cpu.qweight.view(torch.uint8))
    scale = "block_scale" if block else "weight_scale"
    assert torch.equal(getattr(gpu, scale).cpu(), getattr(cpu, scale))
