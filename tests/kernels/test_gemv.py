"""Triton single-row GEMV against torch's linear."""
import pytest
import torch

from atom.kernels.triton.gemv import gemv
from kernel_helpers import DEVICE, gpu_param, rel_err, tol


@pytest.mark.parametrize("n,k,dtype,bias", [
    pytest.param(37, 100, torch.float32, True, id="small-odd-bias"),
    pytest.param(64, 96, torch.bfloat16, False, id="small-bf16"),
    gpu_param(6144, 4096, torch.bfloat16, False, id="llama8b-qkv"),
    gpu_param(4096, 14336, torch.bfloat16, False, id="llama8b-down"),
    gpu_param(151936, 1024, torch.bfloat16, False, id="qwen-lm-head"),
])
def test_gemv_matches_linear(n, k, dtype, bias):
    x = torch.randn(1, k, device=DEVICE).to(dtype)
    w = (torch.randn(n, k, device=DEVICE) / k ** 0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype) if bias else None
    ref = torch.nn.functional.linear(x.double(), w.double(), b.double() if bias else None)
    out = gemv(x, w, b)
    assert out.shape == (1, n)
    assert rel_err(out, ref) < tol(dtype)


def test_linear_dispatch_keeps_other_shapes_on_torch():
    from atom.kernels import get_backend

    be = get_backend("triton")
    x = torch.randn(3, 16, device=DEVICE)
    w = torch.randn(8, 16, device=DEVICE)
    assert torch.allclose(be.linear(x, w), x @ w.T, atol=1e-5)
