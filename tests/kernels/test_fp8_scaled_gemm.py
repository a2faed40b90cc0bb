"""The per-channel-weight × per-token-activation fp8 GEMM against the dequantised operands'
matmul in float64, and against torch._scaled_mm's row-wise mode on the GPU."""
import pytest
import torch

from atom.kernels.triton.fp8_quant import quant_per_token
from atom.kernels.triton.fp8_scaled_gemm import fp8_scaled_gemm, scaled_mm
from kernel_helpers import DEVICE, INTERPRETED, gpu_param, rel_err
from test_fp8_gemv import TOL, fp8_weight
from test_fp8_quant import ref_quant


def reference(xq, xs, q, ws, bias):
    """Both operands dequantised exactly in float64; the kernel differs by accumulation order
    (fp32, promoted every 128 products) and the bf16 rounding of y."""
    x = xq.double() * xs.double().reshape(-1, 1)
    w = q.double() * ws.double()[:, None]
    return torch.nn.functional.linear(x, w, None if bias is None else bias.double())



LLAMA8B = [(4096, 6144, "qkv"), (4096, 4096, "o"), (4096, 28672, "gate_up"), (14336, 4096, "down")]


@pytest.mark.parametrize("m,n,k,bias", [
    pytest.param(1, 64, 128, True, id="one-row-bias"),
    pytest.param(5, 200, 300, False, id="odd-n-odd-k"),
    pytest.param(70, 130, 400, False, id="prefill-tile-partial"),
] + [gpu_param(m, n, k, False, id=f"llama8b-{name}-m{m}") for k, n, name in LLAMA8B
     for m in (16, 256, 2048)])
def test_scaled_mm_matches_dequantized_matmul(m, n, k, bias):
    x = (2 * torch.randn(m, k, device=DEVICE)).to(torch.bfloat16)
    xq, xs = ref_quant(x, None)
    q, ws = fp8_weight(n, k)
    b = torch.randn(n, device=DEVICE).to(torch.bfloat16) if bias else None
    out = scaled_mm(xq, xs, q, ws, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL


@pytest.mark.parametrize("split", [2, 3])
def test_split_k_slices_sum_to_the_dequantized_product(split):
    """The scales are linear in the slices' partials: each slice applies them, the sum adds
    the bias once."""
    x = torch.randn(3, 700, device=DEVICE).to(torch.bfloat16)
    xq, xs = ref_quant(x, None)
    q, ws = fp8_weight(100, 700)
    b = torch.randn(100, device=DEVICE).to(torch.bfloat16)
    out = scaled_mm(xq, xs, q, ws, b, split_k=split)
    assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL


def test_fp8_scaled_gemm_quantizes_x_per_token():
    """The public entry against the reference fed torch's per-token quantisation of x (the
    Triton quantiser's own bytes when interpreted: see test_fp8_block_gemm)."""
    x = torch.randn(6, 272, device=DEVICE).to(torch.bfloat16)
    q, ws = fp8_weight(90, 272)
    xq, xs = quant_per_token(x) if INTERPRETED else ref_quant(x, None)
    assert rel_err(fp8_scaled_gemm(x, q, ws), reference(xq, xs, q, ws, None)) < TOL


@pytest.mark.parametrize("m,k,n", [gpu_param(m, k, n, id=f"llama8b-{name}-m{m}")
                                   for k, n, name in LLAMA8B for m in (16, 2048)])
def test_scaled_mm_agrees_with_torch_scaled_mm_rowwise(m, k, n):
    """The same quantised operands through cuBLASLt's row-wise fp8 GEMM: the two differ by
    accumulation order and each by its own bf16 rounding, two independent errors of TOL's
    size, hence 2 * TOL."""
    x = torch.randn(m, k, device=DEVICE).to(torch.bfloat16)
    xq, xs = quant_per_token(x)
    q, ws = fp8_weight(n, k)
    peer = torch._scaled_mm(xq, q.t(), scale_a=xs, scale_b=ws.view(1, -1),
                            out_dtype=torch.bfloat16)
    assert rel_err(scaled_mm(xq, xs, q, ws), peer) < 2 * TOL

