"""The one-row GEMV's L2 prefetch (l2_prefetch.py): its plan, and that it changes no result."""
import pytest
import torch

from atom.kernels.triton import l2_prefetch
from atom.kernels.triton.gemv import add_rms_norm_gemv, gemv
from kernel_helpers import DEVICE, GPU


def test_plan_fits_the_budget_in_aligned_chunks():
    chunks, chunk = l2_prefetch.plan(row_bytes=4096, stride_bytes=4096, base_ptr=1 << 20,
                                     block_n=8, budget=16384, threads=256)
    assert (chunks, chunk) == (32, 64)  # 2 KB of each of 8 rows, one chunk a thread
    assert chunks & (chunks - 1) == 0 and chunk % l2_prefetch.ALIGN == 0
    # A short row is prefetched whole, never past its end.
    chunks, chunk = l2_prefetch.plan(200, 208, 0, 16, 1 << 30, 128)
    assert chunks * chunk <= 200 and chunk % 16 == 0


@pytest.mark.parametrize("base,stride,budget", [(8, 4096, 16384), (0, 4100, 16384),
                                                (0, 4096, 0), (0, 8, 16384)])
def test_plan_refuses_what_a_bulk_prefetch_cannot_take(base, stride, budget):
    assert l2_prefetch.plan(min(stride, 4096), stride, base, 8, budget, 256) == (0, 0)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_prefetch_changes_no_output(fp8):
    """Every budget, a weight whose rows are not 16-byte aligned (no prefetch), and the fused
    norm give the bits of the GEMV without a prefetch; a bulk prefetch of a bad address would
    fault instead."""
    n, k = 6144, 4096
    x = torch.randn(1, k, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(n, k + 8, device=DEVICE, dtype=torch.bfloat16)
    scale = torch.rand(n, device=DEVICE) / 448 + 1e-4 if fp8 else None
    if fp8:
        w = w.to(torch.float8_e4m3fn)
    for weight in (w[:, :k].contiguous(), w[:, 8:]):
        ref = gemv(x, weight, w_scale=scale, prefetch=0)
        for budget in (4096, 16384, 1 << 30):
            assert torch.equal(gemv(x, weight, w_scale=scale, prefetch=budget), ref)
    nw = torch.randn(k, device=DEVICE, dtype=torch.bfloat16)
    weight = w[:, :k].contiguous()
    ref = add_rms_norm_gemv(x, x, nw, 1e-6, weight, w_scale=scale, prefetch=0)
    out = add_rms_norm_gemv(x, x, nw, 1e-6, weight, w_scale=scale)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
