"""Triton SiLU-and-mul against the torch reference."""
import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.activation import silu_and_mul
from kernel_helpers import DEVICE, gpu_param, rel_err, tol


@pytest.mark.parametrize("rows,inter,dtype", [
    pytest.param(4, 40, torch.float32, id="small-f32"),
    pytest.param(3, 24, torch.bfloat16, id="small-bf16"),
    gpu_param(300, 14336, torch.bfloat16, id="llama8b"),
    gpu_param(33, 3072, torch.bfloat16, id="qwen0.6b"),
])
def test_silu_and_mul(rows, inter, dtype):
    x = (2 * torch.randn(rows, 2 * inter, device=DEVICE)).to(dtype)
    out = silu_and_mul(x)
    assert out.shape == (rows, inter)
    assert rel_err(out, torch_ref.silu_and_mul(x)) < tol(dtype)
