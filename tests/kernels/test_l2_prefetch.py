"""The one-row GEMV's L2 prefetch (l2_prefetch.py) changes no result. (That it is compiled in,
ahead of the PDL wait, is test_sm90_compile's.)"""
import pytest
import torch

from atom.kernels.triton.gemv import add_rms_norm_gemv, gemv
from kernel_helpers import DEVICE


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 14336), (37, 200)], ids=["qkv", "down", "odd"])
def test_prefetch_changes_no_output(fp8, n, k):
    """Every depth, on a contiguous weight and on a strided view of a wider one, and the fused
    norm: the bits of the GEMV without a prefetch (a prefetch past a row's end, which the
    clamp prevents, could fault instead)."""
    x = torch.randn(1, k, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(n, k + 8, device=DEVICE, dtype=torch.bfloat16)
    scale = torch.rand(n, device=DEVICE) / 448 + 1e-4 if fp8 else None
    if fp8:
        w = w.to(torch.float8_e4m3fn)
    for weight in (w[:, :k].contiguous(), w[:, 8:]):
        ref = gemv(x, weight, w_scale=scale, prefetch=0)
        for tiles in (1, 2, 8):
            assert torch.equal(gemv(x, weight, w_scale=scale, prefetch=tiles), ref)
    nw = torch.randn(k, device=DEVICE, dtype=torch.bfloat16)
    weight = w[:, :k].contiguous()
    ref = add_rms_norm_gemv(x, x, nw, 1e-6, weight, w_scale=scale, prefetch=0)
    out = add_rms_norm_gemv(x, x, nw, 1e-6, weight, w_scale=scale)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
