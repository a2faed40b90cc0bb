"""Weight-only fp8 GEMV (e4m3 rows, one fp32 scale each, bf16 x) against the dequantised
weight's matmul in float64."""
import functools

import pytest
import torch

from atom.kernels.triton.fp8_gemv import fp8_gemv, takes
from kernel_helpers import (DEVICE, HAS_CUDA, INTERPRETED, assert_same_rounding, gpu_param,
                            rel_err)


@functools.lru_cache(maxsize=2)  # the GPU cases run each shape at several M in a row
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


# y is rounded to bf16 once, with a relative step (ulp) of 2^-8..2^-7 (5.5e-3 on average). Round
# to nearest leaves an rms error of ulp/√12 ≈ 1.6e-3 in ‖y − ref‖/‖ref‖; the interpreter's
# truncating f32 → bf16 leaves ulp/√3 ≈ 3.2e-3. Each bound is about twice that (the fp32 sums'
# own error is ~1e-6).
TOL = 6e-3 if INTERPRETED else 3e-3


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


@pytest.mark.parametrize("n,k,residual", [
    pytest.param(37, 112, True, id="small-residual"),
    pytest.param(64, 96, False, id="small-first-layer"),
    gpu_param(6144, 4096, True, id="llama8b-qkv"),
    gpu_param(28672, 4096, True, id="llama8b-gate-up"),
])
def test_fp8_weight_takes_the_fused_rms_norm(n, k, residual):
    """gemv.py's norm fusion on an e4m3 weight with its row scales: the norm then the
    dequantised weight's linear in float64, h = x + residual as the unfused kernel rounds it
    (within a bf16 ulp interpreted: kernel_helpers.assert_same_rounding)."""
    from atom.kernels.triton.gemv import add_rms_norm_gemv

    x = (3 * torch.randn(1, k, device=DEVICE)).to(torch.bfloat16)
    r = (3 * torch.randn(1, k, device=DEVICE)).to(torch.bfloat16) if residual else None
    nw = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(torch.bfloat16)
    q, s = fp8_weight(n, k)
    h_ref = (x.float() + r.float()).to(torch.bfloat16) if residual else x
    hd = h_ref.double()
    normed = hd / (hd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * nw.double()
    out, h = add_rms_norm_gemv(x, r, nw, 1e-6, q, w_scale=s)
    assert rel_err(out, reference(normed, q, s, None)) < TOL
    assert_same_rounding(h, h_ref)


@pytest.mark.parametrize("n,inter,dtype", [pytest.param(40, 96, torch.float32, id="small"),
                                           gpu_param(4096, 14336, torch.bfloat16, id="llama8b-down")])
def test_fp8_weight_takes_the_fused_silu_gate(n, inter, dtype):
    """The down projection reading [gate | up] itself, on an e4m3 weight: silu_and_mul as the
    torch reference rounds it, then the dequantised weight's linear. The small case runs in
    float32: interpreted, the kernel's two bf16 roundings of silu(gate) * up truncate, and
    that bias (~1e-2 in y) would hide the weight path under test; float32 y differs from the
    float64 reference by its fp32 sums only."""
    from atom.kernels import torch_ref
    from atom.kernels.triton.gemv import gemv

    gate_up = (2 * torch.randn(1, 2 * inter, device=DEVICE)).to(dtype)
    q, s = fp8_weight(n, inter)
    out = gemv(gate_up, q, silu_gate=True, w_scale=s)
    ref = reference(torch_ref.silu_and_mul(gate_up), q, s, None)
    assert rel_err(out, ref) < (TOL if dtype == torch.bfloat16 else 1e-5)


def block_reference(x, w, bias=None):
    """The block-scaled weight dequantised (Fp8Weight.dequantize), its linear in float64."""
    return torch.nn.functional.linear(x.double(), w.dequantize(torch.float64),
                                      None if bias is None else bias.double())


@pytest.mark.parametrize("n,k,bias", [
    pytest.param(200, 304, True, id="partial-blocks-bias"),
    gpu_param(7168, 16384, False, id="r1-o"),
    gpu_param(24576, 1536, False, id="r1-q-b"),
    gpu_param(576, 7168, False, id="r1-kv-a"),
])
def test_block_scaled_weight_at_one_row(n, k, bias):
    """One row against a 128 x 128 block-scaled e4m3 weight: the scales taken into x per
    program row block, the dequantised weight's linear. Rows blocks of 4 to 32 share a scale
    row, and a partial last block (200 rows, 304 columns) reads its own scales."""
    from atom.kernels.fp8_weight import quantize

    w = quantize(torch.randn(n, k, device=DEVICE) / k ** 0.5, block=True)
    x = torch.randn(1, k, device=DEVICE).to(torch.bfloat16)
    b = torch.randn(n, device=DEVICE).to(torch.bfloat16) if bias else None
    for block_n in (None, 4, 32):
        out = fp8_gemv(x, w.qweight, None, b, block_n=block_n, block_scale=w.block_scale)
        assert rel_err(out, block_reference(x, w, b)) < TOL


def test_block_scaled_weight_takes_the_fused_norm_and_silu():
    from atom.kernels import torch_ref
    from atom.kernels.fp8_weight import quantize
    from atom.kernels.triton.gemv import add_rms_norm_gemv, gemv

    k, n = 256, 136
    w = quantize(torch.randn(n, k, device=DEVICE) / k ** 0.5, block=True)
    x = (3 * torch.randn(1, k, device=DEVICE)).to(torch.bfloat16)
    nw = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(torch.bfloat16)
    hd = x.double()
    normed = hd / (hd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * nw.double()
    out, _ = add_rms_norm_gemv(x, None, nw, 1e-6, w.qweight, block_scale=w.block_scale)
    assert rel_err(out, block_reference(normed, w)) < TOL
    gate_up = (2 * torch.randn(1, 2 * k, device=DEVICE)).float()
    out = gemv(gate_up, w.qweight, silu_gate=True, block_scale=w.block_scale)
    assert rel_err(out, block_reference(torch_ref.silu_and_mul(gate_up), w)) < 2e-4
