"""The Triton MLA rotary + latent store against the torch reference: the rotated q_pe, the
[kv_c | rotated k_pe] written at every kept slot (bf16 and fp8 latents, both rotary layouts),
padding slots and every other slot left as they were, and no input written."""
import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.mla_rope_store import mla_rope_store
from kernel_helpers import DEVICE, assert_cache_close, gpu_param, rel_err, tol

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def _cos_sin(max_pos: int, rot: int) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, device=DEVICE).float() / rot))
    ang = torch.arange(max_pos, device=DEVICE).float()[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1).to(BF16)


def _case(tokens, heads, nope, rope, lora, kv_dtype, blocks=8, page=16, seed=0):
    """q and [kv_c | k_pe] as the projections leave them (strided views), a random cache, every
    third slot padding (-1)."""
    g = torch.Generator().manual_seed(seed)
    q = (2 * torch.randn(tokens, heads, nope + rope, generator=g)).to(BF16).to(DEVICE)
    kv_a = (2 * torch.randn(tokens, lora + rope, generator=g)).to(BF16).to(DEVICE)
    blocks = max(blocks, 2 * -(-tokens // page))  # a distinct slot for every token
    cache = torch.randn(blocks, page, lora + rope, generator=g).to(kv_dtype).to(DEVICE)
    slots = torch.randperm(blocks * page, generator=g)[:tokens].to(DEVICE)
    slots[::3] = -1
    pos = torch.randint(0, 4096, (tokens,), generator=g).to(DEVICE)
    return q, kv_a, cache, slots, pos


@pytest.mark.parametrize("is_neox", [False, True], ids=["gptj", "neox"])
@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("tokens,heads,nope,rope,lora", [
    pytest.param(7, 4, 16, 8, 32, id="tiny"),
    gpu_param(300, 128, 128, 64, 512, id="r1-tp1"),
    gpu_param(64, 16, 128, 64, 512, id="r1-tp8"),
])
def test_matches_reference(tokens, heads, nope, rope, lora, kv_dtype, is_neox):
    q, kv_a, cache, slots, pos = _case(tokens, heads, nope, rope, lora, kv_dtype)
    q_pe, kv_c, k_pe = q[..., nope:], kv_a[:, :lora], kv_a[:, lora:]
    cs = _cos_sin(4096, rope)
    scale = 0.5 if kv_dtype == FP8 else 1.0
    inputs = (q.clone(), kv_a.clone())
    out_cache, ref_cache = cache.clone(), cache.clone()
    out = mla_rope_store(pos, q_pe, k_pe, kv_c, out_cache, slots, scale, cs, is_neox)
    ref = torch_ref.mla_rope_store(pos, q_pe, k_pe, kv_c, ref_cache, slots, scale, cs, is_neox)
    assert torch.equal(q, inputs[0]) and torch.equal(kv_a, inputs[1]), "an input was written"
    assert rel_err(out, ref) < tol(BF16)
    flat, flat_ref = out_cache.view(-1, lora + rope), ref_cache.view(-1, lora + rope)
    written = slots[slots >= 0]
    assert_cache_close(flat[written], flat_ref[written])
    kept = torch.ones(flat.shape[0], dtype=torch.bool, device=DEVICE)
    kept[written] = False
    assert torch.equal(flat[kept].float(), cache.view(-1, lora + rope)[kept].float())
