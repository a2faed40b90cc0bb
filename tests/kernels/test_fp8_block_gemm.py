"""DeepSeek-V3's block-scaled fp8 GEMM (e4m3 weight, one scale per 128 × 128 block; x quantised
per 1 × 128 group) against the dequantised operands' matmul in float64."""
import functools

import pytest
import torch

from atom.kernels.triton.fp8_block_gemm import block_scaled_mm, fp8_block_gemm
from atom.kernels.triton.fp8_quant import quant_per_token_group
from kernel_helpers import DEVICE, INTERPRETED, gpu_param, rel_err
from test_fp8_gemv import TOL
from test_fp8_quant import ref_quant


@functools.lru_cache(maxsize=2)  # the GPU cases run each DeepSeek shape at three M in a row
def block_weight(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight as DeepSeek-V3's checkpoints store it: e4m3 codes and `weight_scale_inv`
    [ceil(n/128), ceil(k/128)] with w ≈ q * scale block by block (partial edge blocks too).
    Blocks get scales a decade apart, so a block read with its neighbour's scale shows."""
    g = torch.Generator().manual_seed(seed)
    nb, kb = -(-n // 128), -(-k // 128)
    spread = 10.0 ** torch.randint(-1, 2, (nb, kb), generator=g).float()
    w = torch.randn(n, k, generator=g) / k ** 0.5 * expand(spread, n, k)
    pad = torch.nn.functional.pad(w, (0, kb * 128 - k, 0, nb * 128 - n))
    scale = pad.abs().view(nb, 128, kb, 128).amax((1, 3)) / 448.0
    q = (w / expand(scale, n, k)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.to(DEVICE), scale.to(DEVICE)


def expand(block: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return block.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]


def reference(xq, xs, q, ws, bias):
    """Both operands dequantised exactly (e4m3 × fp32 scale is exact in float64), multiplied in
    float64: the kernel differs by its accumulation order and the output's bf16 rounding."""
    m, k = xq.shape
    x = xq.double() * xs.double().repeat_interleave(128, 1)[:, :k]
    w = q.double() * expand(ws.double(), *q.shape)
    return torch.nn.functional.linear(x, w, None if bias is None else bias.double())


# TOL (test_fp8_gemv) bounds the bf16 rounding of y; the fp8 MMA's reduced-precision
# accumulation inside one 128-long K step adds ~2^-14 relative, far below it.

SMALL = [
    pytest.param(1, 64, 128, True, id="one-row-bias"),
    pytest.param(5, 200, 300, False, id="odd-n-odd-k"),
    pytest.param(70, 130, 256, False, id="prefill-config-partial-tiles"),
]
DEEPSEEK = [(7168, 1536, "q_a_proj"), (1536, 24576, "q_b_proj"), (7168, 576, "kv_a_proj"),
            (512, 32768, "kv_b_proj"), (16384, 7168, "o_proj"), (7168, 36864, "mlp_gate_up"),
            (18432, 7168, "mlp_down"), (7168, 4096, "expert_gate_up"), (2048, 7168, "expert_down")]
LARGE = [gpu_param(m, n, k, False, id=f"{name}-m{m}") for k, n, name in DEEPSEEK for m in (1, 64, 256)]


@pytest.mark.parametrize("m,n,k,bias", SMALL + LARGE)
def test_block_scaled_mm_matches_dequantized_matmul(m, n, k, bias):
    x = (2 * torch.randn(m, k, device=DEVICE)).to(torch.bfloat16)
    xq, xs = ref_quant(x, 128)
    q, ws = block_weight(n, k)
    b = torch.randn(n, device=DEVICE).to(torch.bfloat16) if bias else None
    out = block_scaled_mm(xq, xs, q, ws, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL


@pytest.mark.parametrize("m,bm,bn", [(40, 16, 64), (40, 64, 64), (40, 64, 128), (3, 128, 128)])
def test_every_tile_shape_matches_the_dequantized_product(m, bm, bn):
    """The default configs, a 16-row tile (an mma.sync over f16 on sm_90) and a tile larger than
    M, on one problem whose N and K are not multiples of the tile."""
    x = torch.randn(m, 200, device=DEVICE).to(torch.bfloat16)
    xq, xs = ref_quant(x, 128)
    q, ws = block_weight(150, 200)
    out = block_scaled_mm(xq, xs, q, ws, block_m=bm, block_n=bn)
    assert rel_err(out, reference(xq, xs, q, ws, None)) < TOL


@pytest.mark.parametrize("split", [2, 3, 8])
def test_split_k_slices_sum_to_the_dequantized_product(split):
    """K cut into slices (8 K blocks: 4 + 4, 3 + 3 + 2, eight of one), each slice's fp32
    partial summed by a second launch that adds the bias once."""
    x = torch.randn(5, 1000, device=DEVICE).to(torch.bfloat16)
    xq, xs = ref_quant(x, 128)
    q, ws = block_weight(200, 1000)
    b = torch.randn(200, device=DEVICE).to(torch.bfloat16)
    out = block_scaled_mm(xq, xs, q, ws, b, split_k=split)
    assert rel_err(out, reference(xq, xs, q, ws, b)) < TOL


@pytest.mark.parametrize("m,n,k", [pytest.param(4, 96, 300, id="small"),
                                   gpu_param(64, 7168, 2048, id="expert-down-decode"),
                                   gpu_param(2048, 7168, 2048, id="expert-down-prefill")])
def test_fp8_block_gemm_quantizes_x_per_group_of_128(m, n, k):
    """The public entry (x quantised by its own launch, then the GEMM) against the reference fed torch's quantisation of x, which the Triton quantiser matches
    byte for byte on the GPU (test_fp8_quant). Interpreted, that quantiser can halve an element
    (the interpreter's f32 → e4m3 carry slip), so there the reference takes its own bytes."""
    x = torch.randn(m, k, device=DEVICE).to(torch.bfloat16)
    q, ws = block_weight(n, k)
    xq, xs = quant_per_token_group(x, 128) if INTERPRETED else ref_quant(x, 128)
    out = fp8_block_gemm(x, q, ws)
    assert rel_err(out, reference(xq, xs, q, ws, None)) < TOL


