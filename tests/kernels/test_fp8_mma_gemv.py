"""The W8A8 one-row GEMV on the e4m3 tensor cores (fp8_mma_gemv.py) against the dequantised
operands' matmul in float64, and which weights it takes."""
import pytest
import torch

from atom.kernels.triton import fp8_mma_gemv
from kernel_helpers import DEVICE, gpu_param, rel_err
from test_fp8_gemv import TOL, fp8_weight
from test_fp8_quant import ref_quant
from test_fp8_scaled_gemm import reference


def _bias(n: int) -> torch.Tensor:
    """Seeded, as the weights are: under the interpreter the split test's error over 24 random
    biases spanned 0.16-0.62% against its 0.6% tolerance, so an unseeded one failed at times."""
    return torch.randn(n, generator=torch.Generator().manual_seed(0)).to(DEVICE, torch.bfloat16)


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("n,k,bias", [
    pytest.param(64, 256, True, id="one-tile-bias"),
    pytest.param(128, 768, False, id="two-tiles-three-k-steps"),
    gpu_param(28672, 4096, False, id="llama8b-gate-up"),
    gpu_param(36864, 7168, True, id="dsv3-mlp-gate-up-bias"),
    gpu_param(4096, 14336, False, id="llama8b-down-split"),
])
def test_mma_gemv_matches_dequantized_matmul(m, n, k, bias):
    x = (2 * torch.randn(m, k, device=DEVICE)).to(torch.bfloat16)
    xq, xs = ref_quant(x, None)
    q, ws = fp8_weight(n, k)
    b = _bias(n) if bias else None
    counters = torch.zeros(n // 64, dtype=torch.int32, device=DEVICE)
    out = fp8_mma_gemv.mma_gemv(xq, xs, q, ws, b, counters=counters)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert not counters.any()
    assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL


def test_takes_nothing_off_the_gpu():
    q, _ = fp8_weight(28672 if DEVICE.type == "cpu" else 64, 256)
    assert not fp8_mma_gemv.takes(1, q.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k,split", [(28672, 4096, False), (4096, 14336, True),
                                       (4096, 4096, True), (28672, 4000, None)],
                         ids=["gate-up", "down", "o", "k-off-256"])
@pytest.mark.parametrize("rows,ok", [(1, True), (16, True), (17, False)], ids=["m1", "m16", "m17"])
def test_takes_what_its_tiles_divide_and_splits_only_with_counters(n, k, split, rows, ok):
    """At most 16 rows and shapes the unmasked tiles divide; on the H200 (132 SMs) gate_up's
    448 tiles need no split, down's and o's 64 do, which takes counters."""
    q = torch.empty(n, k, device=DEVICE, dtype=torch.float8_e4m3fn)
    counters = torch.zeros(n // 64, dtype=torch.int32, device=DEVICE)
    assert fp8_mma_gemv.takes(rows, q, counters) == (ok and split is not None)
    assert fp8_mma_gemv.takes(rows, q) == (ok and split is False)
    if split:
        assert fp8_mma_gemv.slices(n, k, DEVICE) == 4


@pytest.mark.parametrize("slices", [2, 4])
@pytest.mark.parametrize("m", [1, 5])
def test_split_k_sums_every_slice_in_order_and_leaves_counters_at_zero(m, slices):
    """K cut into slices: the last slice of each tile sums the partials and zeroes its counter,
    so a second call (a graph replay) starts clean; the same bits as one slice twice over is
    not required (the order is fixed, the association differs), the reference's values are."""
    n, k = 128, 1024
    counters = torch.zeros(n // 64, dtype=torch.int32, device=DEVICE)
    q, ws = fp8_weight(n, k)
    b = _bias(n)
    for seed in (0, 1):
        x = (2 * torch.randn(m, k, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(seed))
             ).to(torch.bfloat16)
        xq, xs = ref_quant(x, None)
        out = fp8_mma_gemv.mma_gemv(xq, xs, q, ws, b, counters=counters, n_slices=slices)
        assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL
        assert not counters.any()
        again = fp8_mma_gemv.mma_gemv(xq, xs, q, ws, b, counters=counters, n_slices=slices)
        assert torch.equal(out, again)  # the sum's order does not depend on arrival
