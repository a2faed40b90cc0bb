"""Triton RMSNorm / fused add+RMSNorm against the torch reference."""
import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.rms_norm import fused_add_rms_norm, rms_norm
from kernel_helpers import DEVICE, assert_same_rounding, gpu_param, rel_err, tol

CASES = [
    pytest.param(5, 48, torch.float32, id="small-f32"),
    pytest.param(3, 100, torch.bfloat16, id="small-bf16-odd"),
    gpu_param(257, 4096, torch.bfloat16, id="llama8b"),
    gpu_param(64, 1024, torch.bfloat16, id="qwen0.6b"),
]


@pytest.mark.parametrize("rows,hidden,dtype", CASES)
def test_rms_norm(rows, hidden, dtype):
    x = torch.randn(rows, hidden, device=DEVICE).to(dtype)
    w = (1 + 0.1 * torch.randn(hidden, device=DEVICE)).to(dtype)
    out = rms_norm(x, w, 1e-6)
    assert rel_err(out, torch_ref.rms_norm(x, w, 1e-6)) < tol(dtype)


@pytest.mark.parametrize("rows,hidden,dtype", CASES)
def test_fused_add_rms_norm(rows, hidden, dtype):
    x = torch.randn(rows, hidden, device=DEVICE).to(dtype)
    res = torch.randn(rows, hidden, device=DEVICE).to(dtype)
    w = (1 + 0.1 * torch.randn(hidden, device=DEVICE)).to(dtype)
    out, s = fused_add_rms_norm(x, res, w, 1e-5)
    s_ref = x + res
    assert_same_rounding(s, s_ref)
    assert rel_err(out, torch_ref.rms_norm(s_ref, w, 1e-5)) < tol(dtype)
