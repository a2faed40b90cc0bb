"""The W8A8 one-row GEMV on the e4m3 tensor cores (fp8_mma_gemv.py) against the dequantised
operands' matmul in float64, and which weights it takes."""
import pytest
import torch

from atom.kernels.triton import fp8_mma_gemv
from kernel_helpers import DEVICE, gpu_param, rel_err
from test_fp8_gemv import TOL, fp8_weight
from test_fp8_quant import ref_quant
from test_fp8_scaled_gemm import reference


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("n,k,bias", [
    pytest.param(64, 256, True, id="one-tile-bias"),
    pytest.param(128, 768, False, id="two-tiles-three-k-steps"),
    gpu_param(28672, 4096, False, id="llama8b-gate-up"),
    gpu_param(36864, 7168, True, id="dsv3-mlp-gate-up-bias"),
])
def test_mma_gemv_matches_dequantized_matmul(m, n, k, bias):
    x = (2 * torch.randn(m, k, device=DEVICE)).to(torch.bfloat16)
    xq, xs = ref_quant(x, None)
    q, ws = fp8_weight(n, k)
    b = torch.randn(n, device=DEVICE).to(torch.bfloat16) if bias else None
    out = fp8_mma_gemv.mma_gemv(xq, xs, q, ws, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL


def test_takes_nothing_off_the_gpu():
    q, _ = fp8_weight(28672 if DEVICE.type == "cpu" else 64, 256)
    assert not fp8_mma_gemv.takes(1, q.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k,taken", [(28672, 4096, True), (6144, 4096, False),
                                       (4096, 4096, False), (4096, 14336, False),
                                       (28672, 4000, False)],
                         ids=["gate-up", "qkv", "o", "down", "k-off-256"])
@pytest.mark.parametrize("rows,ok", [(1, True), (16, True), (17, False)], ids=["m1", "m16", "m17"])
def test_takes_wide_weights_at_few_rows(n, k, taken, rows, ok):
    """Only weights with a 64-row tile for every SM of the H200 (132) without a split, whose
    shape the unmasked tiles divide, and at most 16 rows."""
    q = torch.empty(n, k, device=DEVICE, dtype=torch.float8_e4m3fn)
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    expect = taken and ok and (n // 64 >= sms)
    assert fp8_mma_gemv.takes(rows, q) == expect
