"""Weight-only fp8 GEMV (e4m3 rows, one fp32 scale each, bf16 x) against the dequantised
weight's matmul in float64."""
import pytest
import torch

from atom.kernels.triton.fp8_gemv import fp8_gemv, takes
from kernel_helpers import DEVICE, HAS_CUDA, gpu_param, rel_err


def fp8_weight(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A per-row e4m3 weight as fp8 checkpoints store it: w ≈ q * scale, scale = amax / 448."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) / k ** 0.5
    scale = w.abs().amax(1) / 448.0
    q = (w / scale[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.to(DEVICE), scale.to(DEVICE)


def reference(x, q, scale, bias):
    """The dequantised weight's linear in float64: the kernel's only departures are its fp32
    accumulation order and the bf16 rounding of y."""
    w = q.double() * scale.double()[:, None]
    return torch.nn.functional.linear(x.double(), w, None if bias is None else bias.double())


# bf16 out: half an ulp is 2^-9 ≈ 2e-3 relative per element, so ‖y − ref‖/‖ref‖ ≤ ~2e-3 when the
# fp32 sums are exact to well below that; 4e-3 leaves room for the interpreter's truncating
# f32 → bf16 (a full ulp, 3.9e-3 at worst, ~2.3e-3 in norm over random values).
TOL = 4e-3


@pytest.mark.parametrize("m", [1, 2, 5, 16])
@pytest.mark.parametrize("n,k,bias", [
    pytest.param(37, 112, True, id="odd-n-bias"),
    pytest.param(64, 400, False, id="k-past-one-block"),
])
def test_fp8_gemv_matches_dequantized_linear(m, n, k, bias):
    x = torch.randn(m, k, device=DEVICE).to(torch.bfloat16)
    q, s = fp8_weight(n, k)
    b = torch.randn(n, device=DEVICE).to(torch.bfloat16) if bias else None
    out = fp8_gemv(x, q, s, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_err(out, reference(x, q, s, b)) < TOL


@pytest.mark.parametrize("dot", [False, True])
def test_both_inner_products_serve_one_row(dot):
    """The FMA path (the one-row default) and the tensor-core path give the same product."""
    x = torch.randn(1, 272, device=DEVICE).to(torch.bfloat16)
    q, s = fp8_weight(50, 272)
    assert rel_err(fp8_gemv(x, q, s, dot=dot), reference(x, q, s, None)) < TOL


def test_strided_rows_of_x():
    """x as a row slice of a wider buffer (stride(0) > K)."""
    buf = torch.randn(3, 200, device=DEVICE).to(torch.bfloat16)
    x = buf[:, :160]
    q, s = fp8_weight(40, 160)
    assert rel_err(fp8_gemv(x, q, s), reference(x, q, s, None)) < TOL


@pytest.mark.parametrize("m", [1, 4, 16])
@pytest.mark.parametrize("n,k", [
    gpu_param(6144, 4096, id="llama8b-qkv"),
    gpu_param(4096, 4096, id="llama8b-o"),
    gpu_param(28672, 4096, id="llama8b-gate-up"),
    gpu_param(4096, 14336, id="llama8b-down"),
])
def test_fp8_gemv_at_llama8b_shapes(m, n, k):
    x = torch.randn(m, k, device=DEVICE).to(torch.bfloat16)
    q, s = fp8_weight(n, k)
    assert rel_err(fp8_gemv(x, q, s), reference(x, q, s, None)) < TOL


def test_takes_few_aligned_rows_on_cuda_only():
    q, _ = fp8_weight(32, 64)
    x = torch.randn(1, 64, device=DEVICE).to(torch.bfloat16)
    assert takes(x, q) == HAS_CUDA
    if HAS_CUDA:
        assert takes(torch.randn(16, 64, device=DEVICE).to(torch.bfloat16), q)
        assert not takes(torch.randn(17, 64, device=DEVICE).to(torch.bfloat16), q)
        assert not takes(x, q.to(torch.bfloat16))
        q72, _ = fp8_weight(32, 72)
        assert not takes(torch.randn(1, 72, device=DEVICE).to(torch.bfloat16), q72)
