"""The fp8 linears on the GPU against the float32 reference (fp8_reference.py) at Llama-3.1-8B's
and DeepSeek-V3's shapes, and the Triton backend's fp8 engine against the torch backend's.

Both sides quantize the activations the same way, so what remains is the GEMM's float32 sum
order and the bf16 output: a relative error of a few bf16 steps (2^-8 each)."""
from __future__ import annotations

import pytest
import torch

from atom.kernels import fp8_reference
from atom.kernels.fp8_linear import Fp8Kernels
from atom.kernels.fp8_weight import quantize

pytestmark = pytest.mark.gpu

# (K, N): 8B's q|k|v, gate|up and down projections.
SHAPES_8B = [(4096, 6144), (4096, 28672), (14336, 4096)]
# DeepSeek-V3's q_a_proj, kv_a_proj_with_mqa (576 rows: a partial last block) and o_proj.
SHAPES_DSV3 = [(7168, 1536), (7168, 576), (16384, 7168)]
ROWS = [1, 16, 384, 2048]
REL = 2 ** -6


def _case(k: int, n: int, m: int, block: bool):
    g = torch.Generator(device="cuda").manual_seed(k + n + m)
    w = quantize(torch.randn(n, k, device="cuda", generator=g) * 0.02, block=block)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    return x, w


def _assert_near(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.dtype == torch.bfloat16 and ours.shape == ref.shape
    err = (ours.float() - ref.float()).norm() / ref.float().norm()
    assert err <= REL, float(err)


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("k,n", SHAPES_8B)
def test_scaled_mm_matches_the_reference_at_8b_shapes(k, n, m):
    x, w = _case(k, n, m, block=False)
    _assert_near(Fp8Kernels.load().scaled_mm(x, w, None), fp8_reference.fp8_linear(x, w))


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("k,n", SHAPES_8B)
def test_static_input_scale_matches_the_reference(k, n, m):
    x, w = _case(k, n, m, block=False)
    w.input_scale = (x.float().abs().amax() / 448).reshape(())
    _assert_near(Fp8Kernels.load().linear(x, w), fp8_reference.fp8_linear(x, w))


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("k,n", SHAPES_8B)
def test_the_dispatched_fp8_linear_matches_the_reference(k, n, m):
    """Whatever kernel takes the shape: the weight-only Triton GEMV at few rows, cuBLASLt's
    W8A8 GEMM above."""
    x, w = _case(k, n, m, block=False)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    kernels = Fp8Kernels.load()
    gemv = kernels.gemv is not None and kernels.gemv.takes(x, w.qweight)
    ref = (fp8_reference.weight_only_linear if gemv else fp8_reference.fp8_linear)(x, w, bias)
    _assert_near(kernels.linear(x, w, bias), ref)


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("k,n", SHAPES_DSV3 + SHAPES_8B[:1])
def test_block_fp8_linear_matches_the_reference(k, n, m):
    """The weight-only GEMV at one row (block scales on x), the block GEMM over x quantised
    per 128-group above."""
    x, w = _case(k, n, m, block=True)
    kernels = Fp8Kernels.load()
    ref = (fp8_reference.weight_only_linear if kernels.gemv_takes(x, w)
           else fp8_reference.fp8_linear)(x, w)
    assert kernels.gemv_takes(x, w) == (m == 1)
    _assert_near(kernels.linear(x, w), ref)


@pytest.mark.parametrize("fmt", ["ct_tensor_static", "ct_channel_dynamic", "fp8_block",
                                 "modelopt_tensor_static"])
def test_triton_engine_matches_the_torch_engine_on_fp8_checkpoints(tmp_path, fmt):
    """A tiny llama checkpoint in each format, bf16 on the GPU: the Triton backend (CUDA graphs
    on) against the torch backend's emulation, last-position logits of one prefill."""
    from tests.quant.fp8_checkpoints import write_fp8_checkpoint
    from tests.quant.test_fp8_checkpoints import BLOCK_SHAPES, triton_against_torch_on_the_gpu

    over = BLOCK_SHAPES["llama"] if fmt == "fp8_block" else {}
    ckpt = write_fp8_checkpoint("llama", fmt, tmp_path, **over)
    err = triton_against_torch_on_the_gpu(ckpt.path)
    assert err <= 2e-2, err


@pytest.mark.parametrize("m", [1, 384])
@pytest.mark.parametrize("k,n", [(4096, 6144), (4096, 28672)])
def test_fused_norm_and_fp8_projection_match_the_unfused_ops(k, n, m):
    """TritonBackend.add_rms_norm_linear with an fp8 weight (the norm inside the GEMV at one
    row of the narrow weight, the norm quantizing for the W8A8 GEMV at one row of the wide one
    and for the GEMM above) against the backend's own unfused norm and
    the reference linear."""
    from atom.kernels.triton_backend import TritonBackend

    x, w = _case(k, n, m, block=False)
    res = torch.randn_like(x)
    nw = torch.rand(k, device="cuda", dtype=torch.bfloat16) + 0.5
    be = TritonBackend()
    out, h = be.add_rms_norm_linear(x, res, nw, 1e-5, w)
    normed, h_ref = be.fused_add_rms_norm(x, res, nw, 1e-5)
    # Weight-only where the GEMV takes the rows, unless the wide weight's W8A8 GEMV does.
    mma = be._fp8.mma_takes(x, w, "rms_norm_quant", be._mma_counters)
    weight_only = be._fp8.gemv_takes(normed, w) and not mma
    assert mma == (m == 1 and n == 28672)
    ref = (fp8_reference.weight_only_linear if weight_only else fp8_reference.fp8_linear)(normed, w)
    torch.testing.assert_close(h, h_ref, rtol=0, atol=0)
    _assert_near(out, ref)


@pytest.mark.parametrize("m", [1, 384])
def test_fused_silu_and_fp8_down_projection_match_the_unfused_ops(m):
    """Qwen3-0.6B's down projection (K 3072: short enough for the fused SiLU GEMV)."""
    from atom.kernels import torch_ref
    from atom.kernels.triton_backend import TritonBackend

    x, _ = _case(2 * 3072, 16, m, block=False)
    w = quantize(torch.randn(1024, 3072, device="cuda") * 0.02)
    act = torch_ref.silu_and_mul(x.float()).to(torch.bfloat16)
    be = TritonBackend()
    gemv = be._fp8.gemv_takes(act, w)
    ref = (fp8_reference.weight_only_linear if gemv else fp8_reference.fp8_linear)(act, w)
    _assert_near(be.silu_and_mul_linear(x, w), ref)


@pytest.mark.parametrize("m", [1, 16])
def test_silu_and_the_8b_down_projection_through_the_split_w8a8_gemv(m):
    """Llama-3.1-8B's down projection (K 14336: past the fused SiLU GEMV) at decode rows: the
    activation quantized per token by silu_mul_quant, then the W8A8 GEMV in 4 K slices on the
    backend's counters (made at weights_prepared), against the reference's W8A8 linear."""
    from atom.kernels import torch_ref
    from atom.kernels.triton_backend import TritonBackend

    x, _ = _case(2 * 14336, 16, m, block=False)
    w = quantize(torch.randn(4096, 14336, device="cuda") * 0.02)
    be = TritonBackend()
    w = be.prepare_weight(w)
    be.weights_prepared()
    act = torch_ref.silu_and_mul(x.float()).to(torch.bfloat16)
    assert be._fp8.mma_takes(x, w, "silu_mul_quant", be._mma_counters)
    for _ in range(2):  # the counters are back at zero for the second call
        _assert_near(be.silu_and_mul_linear(x, w), fp8_reference.fp8_linear(act, w))
    assert not be._mma_counters.any()


@pytest.mark.parametrize("m", ROWS[1:])
@pytest.mark.parametrize("k,n", SHAPES_8B)
def test_the_triton_fp8_gemm_matches_the_reference(k, n, m):
    """The rival fp8_choice.py times against cuBLASLt gives the same result."""
    kernels = Fp8Kernels.load()
    if kernels.scaled_gemm is None:
        pytest.skip("this install has no atom/kernels/triton/fp8_scaled_gemm.py")
    x, w = _case(k, n, m, block=False)
    _assert_near(kernels.scaled_mm(x, w, None, triton=True), fp8_reference.fp8_linear(x, w))


def test_the_gemm_choice_times_every_bucket_of_a_shape():
    from atom.kernels import fp8_choice

    kernels = Fp8Kernels.load()
    if kernels.scaled_gemm is None:
        pytest.skip("this install has no atom/kernels/triton/fp8_scaled_gemm.py")
    chosen = fp8_choice.choose({(6144, 4096)}, kernels.gemm, torch.device("cuda"))
    assert set(chosen) == {(6144, 4096)} and chosen[(6144, 4096)] <= set(fp8_choice.BUCKETS)
