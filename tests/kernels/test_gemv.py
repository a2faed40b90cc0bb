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


@pytest.mark.parametrize("n,inter,dtype,bias", [
    pytest.param(37, 100, torch.float32, True, id="small-odd-bias"),
    pytest.param(64, 96, torch.bfloat16, False, id="small-bf16"),
    gpu_param(1024, 3072, torch.bfloat16, False, id="qwen0.6b-down"),
    gpu_param(4096, 14336, torch.bfloat16, False, id="llama8b-down"),
])
def test_silu_gated_gemv_matches_silu_and_mul_then_linear(n, inter, dtype, bias):
    """The down projection reading [gate | up] itself: same as the torch reference's
    silu_and_mul (rounded to the activation dtype) followed by the linear."""
    from atom.kernels import torch_ref

    gate_up = (2 * torch.randn(1, 2 * inter, device=DEVICE)).to(dtype)
    w = (torch.randn(n, inter, device=DEVICE) / inter ** 0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype) if bias else None
    act = torch_ref.silu_and_mul(gate_up)
    ref = torch.nn.functional.linear(act.double(), w.double(), b.double() if bias else None)
    out = gemv(gate_up, w, b, silu_gate=True)
    assert out.shape == (1, n)
    assert rel_err(out, ref) < tol(dtype)


@pytest.mark.parametrize("rows", [1, 3])
def test_backend_silu_and_mul_linear_matches_reference(rows):
    """Both paths of the backend op (the fused GEMV where it takes the row, the two kernels
    otherwise) against the torch reference."""
    from atom.kernels import get_backend

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    x = torch.randn(rows, 2 * 48, device=DEVICE).to(dtype)
    w = (torch.randn(40, 48, device=DEVICE) / 48 ** 0.5).to(dtype)
    out = get_backend("triton").silu_and_mul_linear(x, w)
    ref = get_backend("torch").silu_and_mul_linear(x, w)
    assert rel_err(out, ref) < tol(dtype)


@pytest.mark.parametrize("n,k,dtype,residual,bias", [
    pytest.param(37, 100, torch.float32, True, True, id="small-odd-residual-bias"),
    pytest.param(64, 96, torch.bfloat16, False, False, id="small-bf16-first-layer"),
    gpu_param(6144, 4096, torch.bfloat16, True, False, id="llama8b-qkv"),
    gpu_param(28672, 4096, torch.bfloat16, True, False, id="llama8b-gate-up"),
    gpu_param(4096, 1024, torch.bfloat16, True, False, id="qwen0.6b-qkv"),
])
def test_add_rms_norm_gemv_matches_norm_then_linear(n, k, dtype, residual, bias):
    """The projection with the (residual-add +) RMSNorm inside: the same output as the norm then
    the linear in float64, and h = x + residual rounded as the unfused kernel rounds it."""
    from atom.kernels.triton.gemv import add_rms_norm_gemv

    x = (3 * torch.randn(1, k, device=DEVICE)).to(dtype)
    r = (3 * torch.randn(1, k, device=DEVICE)).to(dtype) if residual else None
    nw = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(dtype)
    w = (torch.randn(n, k, device=DEVICE) / k ** 0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype) if bias else None
    h_ref = (x.float() + r.float()).to(dtype) if residual else x
    hd = h_ref.double()
    normed = hd / (hd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * nw.double()
    ref = torch.nn.functional.linear(normed, w.double(), b.double() if bias else None)
    out, h = add_rms_norm_gemv(x, r, nw, 1e-6, w, b)
    assert out.shape == (1, n)
    assert rel_err(out, ref) < tol(dtype)
    assert torch.equal(h, h_ref)


@pytest.mark.parametrize("rows,residual", [(1, True), (1, False), (3, True)])
def test_backend_add_rms_norm_linear_matches_reference(rows, residual):
    """Both paths of the backend op (the fused GEMV for one row on the GPU, the norm kernel and
    the linear otherwise) against the torch reference."""
    from atom.kernels import get_backend

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    x = torch.randn(rows, 48, device=DEVICE).to(dtype)
    r = torch.randn(rows, 48, device=DEVICE).to(dtype) if residual else None
    nw = (1 + 0.2 * torch.randn(48, device=DEVICE)).to(dtype)
    w = (torch.randn(40, 48, device=DEVICE) / 48 ** 0.5).to(dtype)
    out, h = get_backend("triton").add_rms_norm_linear(x, r, nw, 1e-6, w)
    ref, h_ref = get_backend("torch").add_rms_norm_linear(x, r, nw, 1e-6, w)
    assert rel_err(out, ref) < tol(dtype)
    assert rel_err(h, h_ref) < tol(dtype)
