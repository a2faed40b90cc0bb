"""fp8 activation quantisation (per token, per token-group) against the same formula in torch."""
import pytest
import torch

from atom.kernels.triton.fp8_quant import EPS, quant_per_token, quant_per_token_group
from kernel_helpers import DEVICE, INTERPRETED, assert_same_rounding, gpu_param


def ref_quant(x: torch.Tensor, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """scale = max(amax / 448, EPS) over each row (group=None) or each row's group of columns;
    q = x * (1 / scale) clamped to ±448, in float32."""
    m, k = x.shape
    g = k if group is None else group
    pad = -k % g
    xf = torch.nn.functional.pad(x.float(), (0, pad)).view(m, -1, g)
    # amax / 448 correctly rounded (as the kernel's div_rn): in float64, then to float32 (double
    # rounding is innocuous for one division). float32 `t / 448.0` is not: on CUDA torch
    # multiplies by the float32 reciprocal, one ulp off for some amax values.
    scale = (xf.abs().amax(-1).double() / 448.0).float().clamp_min(EPS)
    q = (xf * (1.0 / scale[..., None])).clamp(-448, 448).view(m, -1)[:, :k].to(torch.float8_e4m3fn)
    return q, scale


def assert_e4m3_equal(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Byte-equal on the GPU. Triton's interpreter converts f32 → e4m3 with ties away from zero
    (10.5 → 11, not 10) and dropping a mantissa carry into the exponent (31.4 → 16, not 32), so
    interpreted, an element may be one e4m3 step off or half the reference."""
    o, r = out.float(), ref.float()
    if not INTERPRETED:
        assert torch.equal(o, r)
        return
    step = torch.exp2(torch.floor(torch.log2(r.abs().clamp_min(2 ** -6))) - 3)
    assert ((o == r) | ((o - r).abs() <= step) | (2 * o == r)).all()


# The interpreter's carry slip (assert_e4m3_equal) turns a value just below 2^e that rounds up
# to 2^e into 2^(e-1): an error of at most 2^(e-1) < x / 2 / (1 - 2^-5), 0.516 of x.
SLIP = 0.52

SHAPES = [
    pytest.param(1, 100, torch.bfloat16, id="one-row-odd-k"),
    pytest.param(5, 300, torch.float32, id="fp32-odd-k"),
    pytest.param(3, 4096 + 37, torch.float16, id="k-one-block-of-8k"),
    pytest.param(2, 16384 + 37, torch.float16, id="k-past-one-block"),
    gpu_param(256, 7168, torch.bfloat16, id="deepseek-hidden"),
    gpu_param(64, 18432, torch.bfloat16, id="deepseek-mlp"),
]


@pytest.mark.parametrize("m,k,dtype", SHAPES)
def test_quant_per_token_matches_reference(m, k, dtype):
    x = (3 * torch.randn(m, k, device=DEVICE)).to(dtype)
    x[0, 7] = 40.0  # one outlier row: its scale is set by it
    q, s = quant_per_token(x)
    rq, rs = ref_quant(x, None)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (m, k)
    assert s.dtype == torch.float32 and s.shape == (m, 1)
    assert torch.equal(s, rs)
    assert_e4m3_equal(q, rq)


@pytest.mark.parametrize("group", [128, 64])
@pytest.mark.parametrize("m,k,dtype", SHAPES)
def test_quant_per_token_group_matches_reference(m, k, dtype, group):
    x = (3 * torch.randn(m, k, device=DEVICE)).to(dtype)
    q, s = quant_per_token_group(x, group)
    rq, rs = ref_quant(x, group)
    assert q.shape == (m, k) and s.shape == (m, -(-k // group))
    assert torch.equal(s, rs)
    assert_e4m3_equal(q, rq)


def test_zero_rows_quantize_to_zero_with_finite_scales():
    x = torch.zeros(2, 200, device=DEVICE, dtype=torch.bfloat16)
    for q, s in (quant_per_token(x), quant_per_token_group(x)):
        assert torch.isfinite(s).all() and (s > 0).all()
        assert (q.float() == 0).all()


def test_round_trip_error_is_within_half_an_e4m3_step():
    """e4m3 keeps 3 mantissa bits: a normal value comes back within half a step (2^-4 of its
    magnitude), a subnormal one (|x / scale| < 2^-6) within half the subnormal step, 2^-10 in
    units of its scale; nothing saturates since |x / scale| ≤ 448. Interpreted, the carry slip
    (see assert_e4m3_equal) can halve a value, so only SLIP holds there."""
    x = torch.randn(4, 1000, device=DEVICE, dtype=torch.float32)
    q, s = quant_per_token_group(x)
    s_el = s.repeat_interleave(128, 1)[:, :1000]
    rel = SLIP if INTERPRETED else 2.0 ** -4
    err = (q.float() * s_el - x).abs()
    assert (err <= rel * x.abs() + 2.0 ** -10 * s_el).all()


NORM_SHAPES = [
    pytest.param(3, 300, True, id="odd-k-residual"),
    pytest.param(2, 256, False, id="first-layer"),
    gpu_param(64, 7168, True, id="deepseek-hidden"),
    gpu_param(256, 4096, True, id="llama8b-hidden"),
]


def _norm_inputs(m, k, residual):
    x = (3 * torch.randn(m, k, device=DEVICE)).to(torch.bfloat16)
    r = (3 * torch.randn(m, k, device=DEVICE)).to(torch.bfloat16) if residual else None
    w = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(torch.bfloat16)
    return x, r, w


@pytest.mark.parametrize("group", [128, None])
@pytest.mark.parametrize("m,k,residual", NORM_SHAPES)
def test_rms_norm_quant_gives_the_unfused_kernels_bytes(m, k, residual, group):
    """Fused (residual-add +) RMSNorm + quantisation against rms_norm.py's kernel followed by
    this file's quantiser: the same norm code and roundings, so the same bytes and scales, on
    the GPU and interpreted alike."""
    from atom.kernels.triton.fp8_quant import rms_norm_quant
    from atom.kernels.triton.rms_norm import fused_add_rms_norm, rms_norm

    x, r, w = _norm_inputs(m, k, residual)
    normed, h_ref = fused_add_rms_norm(x, r, w, 1e-6) if residual else (rms_norm(x, w, 1e-6), x)
    rq, rs = quant_per_token(normed) if group is None else quant_per_token_group(normed, group)
    q, s, h = rms_norm_quant(x, r, w, 1e-6, group)
    assert torch.equal(h, h_ref)
    assert torch.equal(s, rs)
    assert torch.equal(q.float(), rq.float())


@pytest.mark.parametrize("m,k,residual", NORM_SHAPES)
def test_rms_norm_quant_dequantizes_to_the_reference_norm(m, k, residual):
    """Against torch_ref's norm (float32 math, bf16 out): q * scale within an e4m3 step of it
    (half a step, or a full one where the norm's output is a bf16 ulp off torch's on a rounding
    boundary; SLIP interpreted), and h = x + residual rounded as the reference rounds it."""
    from atom.kernels import torch_ref
    from atom.kernels.triton.fp8_quant import rms_norm_quant

    x, r, w = _norm_inputs(m, k, residual)
    h_ref = (x.float() + r.float()).to(torch.bfloat16) if residual else x
    normed = torch_ref.rms_norm(h_ref, w, 1e-6).float()
    q, s, h = rms_norm_quant(x, r, w, 1e-6, 128)
    assert_same_rounding(h, h_ref)
    s_el = s.repeat_interleave(128, 1)[:, :k]
    rel = SLIP if INTERPRETED else 2.0 ** -3
    assert ((q.float() * s_el - normed).abs() <= rel * normed.abs() + 2.0 ** -9 * s_el).all()


@pytest.mark.parametrize("m,inter,dtype", [
    pytest.param(3, 300, torch.bfloat16, id="odd-width"),
    pytest.param(2, 16384 + 37, torch.bfloat16, id="past-one-block"),
    pytest.param(2, 200, torch.float32, id="fp32"),
    gpu_param(512, 14336, torch.bfloat16, id="llama8b-down"),
    gpu_param(64, 18432, torch.bfloat16, id="deepseek-dense-down"),
])
def test_silu_mul_quant_gives_the_unfused_kernels_bytes(m, inter, dtype):
    """The fused activation + quantisation against activation.py's SiLU-and-mul followed by
    quant_per_token: the same activation code and roundings, so the same bytes and scales, on
    the GPU and interpreted alike."""
    from atom.kernels.triton.activation import silu_and_mul
    from atom.kernels.triton.fp8_quant import silu_mul_quant

    x = (3 * torch.randn(m, 2 * inter, device=DEVICE)).to(dtype)
    x[0, inter + 5] = 60.0  # an outlier in the up half sets row 0's scale
    rq, rs = quant_per_token(silu_and_mul(x))
    q, s = silu_mul_quant(x)
    assert q.shape == (m, inter) and s.shape == (m, 1)
    assert torch.equal(s, rs)
    assert torch.equal(q.float(), rq.float())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [32, 512])
def test_down_projection_quantizes_its_activation_in_one_launch(rows):
    """TritonBackend.silu_and_mul_linear on a per-channel fp8 weight past the GEMV's rows: the
    fused activation-quantiser feeds the GEMM, equal to the unfused ops (the same bytes into
    the same GEMM), and the bf16 SiLU-and-mul kernel does not run."""
    from atom.kernels.fp8_weight import quantize
    from atom.kernels.triton_backend import TritonBackend

    be = TritonBackend()
    w = quantize((0.02 * torch.randn(4096, 14336, device="cuda")).to(torch.bfloat16))
    x = (2 * torch.randn(rows, 2 * 14336, device="cuda")).to(torch.bfloat16)
    ref = be.linear(be.silu_and_mul(x), w)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = be.silu_and_mul_linear(x, w)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert any("_per_token_kernel" in n for n in names)
    assert not any("_silu_and_mul_kernel" in n for n in names)
    assert torch.equal(out, ref)
