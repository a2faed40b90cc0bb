"""Triton rotary (neox and gptj, partial rotary, strided qkv views) against the torch reference."""
import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.rotary import rotary
from kernel_helpers import DEVICE, gpu_param, rel_err, tol


def _cos_sin(max_pos: int, rot: int) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    ang = torch.arange(max_pos).float()[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("tokens,hq,hk,d,rot,dtype", [
    pytest.param(5, 4, 2, 16, 16, torch.float32, id="small-f32"),
    pytest.param(3, 3, 1, 16, 8, torch.bfloat16, id="small-partial-bf16"),
    gpu_param(513, 32, 8, 128, 128, torch.bfloat16, id="llama8b"),
    gpu_param(64, 16, 8, 128, 128, torch.bfloat16, id="qwen0.6b"),
])
def test_rotary_on_qkv_view(tokens, hq, hk, d, rot, dtype, is_neox):
    qkv = torch.randn(tokens, (hq + 2 * hk) * d, device=DEVICE).to(dtype)
    q = qkv[:, :hq * d].view(tokens, hq, d)
    k = qkv[:, hq * d:(hq + hk) * d].view(tokens, hk, d)
    cache = _cos_sin(4096, rot).to(DEVICE)
    pos = torch.randint(0, 4096, (tokens,), device=DEVICE)
    q_ref, k_ref = torch_ref.rotary(pos, q.clone(), k.clone(), cache, is_neox)
    v_before = qkv[:, (hq + hk) * d:].clone()
    q_out, k_out = rotary(pos, q, k, cache, is_neox)
    assert rel_err(q_out, q_ref) < tol(dtype)
    assert rel_err(k_out, k_ref) < tol(dtype)
    assert torch.equal(qkv[:, (hq + hk) * d:], v_before), "rotary touched v"
