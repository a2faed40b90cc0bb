"""Fused (q/k RMSNorm +) rotary + KV-cache write against the torch reference, which is the
composition of the single ops (rms_norm, rotary, store_kv)."""
import pytest
import torch

from atom.kernels import get_backend
from atom.kernels.triton.rope_kv_store import rope_store_kv
from kernel_helpers import DEVICE, assert_cache_close, gpu_param, rel_err, tol

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def _cos_sin(max_pos: int, rot: int) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, device=DEVICE).float() / rot))
    ang = torch.arange(max_pos, device=DEVICE).float()[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1)


def _case(tokens, hq, hk, d, rot, dtype, kv_dtype, qk_norm, blocks=8, page=4, seed=0):
    """qkv as the projection leaves it (q, k, v are strided views), random caches (so a write
    to a skipped slot shows), slots with every third token padding (-1)."""
    g = torch.Generator().manual_seed(seed)
    qkv = (3 * torch.randn(tokens, (hq + 2 * hk) * d, generator=g)).to(dtype).to(DEVICE)
    q = qkv[:, :hq * d].view(tokens, hq, d)
    k = qkv[:, hq * d:(hq + hk) * d].view(tokens, hk, d)
    v = qkv[:, (hq + hk) * d:].view(tokens, hk, d)
    weights = {}
    if qk_norm:
        weights = dict(q_norm_weight=(1 + 0.2 * torch.randn(d, generator=g)).to(dtype).to(DEVICE),
                       k_norm_weight=(1 + 0.2 * torch.randn(d, generator=g)).to(dtype).to(DEVICE),
                       norm_eps=1e-6)
    k_cache, v_cache = (torch.randn(blocks, page, hk, d, generator=g).to(kv_dtype).to(DEVICE)
                        for _ in range(2))
    slots = torch.randperm(blocks * page, generator=g)[:tokens].to(DEVICE)
    if tokens > 1:  # a one-token (decode) case keeps its slot, so the cache is still checked
        slots[::3] = -1
    pos = torch.randint(0, 2048, (tokens,), generator=g).to(DEVICE)
    return qkv, (q, k, v), (k_cache, v_cache), slots, pos, _cos_sin(2048, rot), weights


def _run(fn, case, is_neox, scales):
    """fn's rotated q, and the caches it wrote (on copies: every call sees the same inputs)."""
    qkv, (q, k, v), (kc, vc), slots, pos, cs, weights = case
    kc, vc = kc.clone(), vc.clone()
    q_out = fn(pos, q, k, v, kc, vc, slots, *scales, cs, is_neox, **weights)
    return q_out, kc, vc


def _check(case, is_neox, scales, fused_fn):
    qkv, (q, k, v), caches, slots, pos, cs, weights = case
    qkv_before = qkv.clone()
    q_out, kc, vc = _run(fused_fn, case, is_neox, scales)
    q_ref, kc_ref, vc_ref = _run(get_backend("torch").rope_store_kv, case, is_neox, scales)
    assert torch.equal(qkv, qkv_before), "an input was written"
    assert rel_err(q_out, q_ref) < tol(q.dtype)
    written = slots[slots >= 0]
    for out, ref, before in ((kc, kc_ref, caches[0]), (vc, vc_ref, caches[1])):
        o, r, b = (c.view(-1, *c.shape[2:]) for c in (out, ref, before))
        assert_cache_close(o[written], r[written])
        kept = torch.ones(o.shape[0], dtype=torch.bool, device=o.device)
        kept[written] = False
        assert torch.equal(o[kept].view(torch.uint8), b[kept].view(torch.uint8)), \
            "wrote a slot it was not given"


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("qk_norm", [True, False], ids=["qk-norm", "no-norm"])
@pytest.mark.parametrize("kv_dtype", [None, FP8], ids=["kv-model-dtype", "kv-fp8"])
@pytest.mark.parametrize("tokens,hq,hk,d,dtype", [
    pytest.param(7, 4, 2, 16, torch.float32, id="small-f32"),
    pytest.param(5, 3, 1, 32, BF16, id="small-bf16"),
    gpu_param(300, 16, 8, 128, BF16, id="qwen3-0.6b"),
    gpu_param(1, 16, 8, 128, BF16, id="qwen3-0.6b-decode"),
    gpu_param(257, 32, 8, 128, BF16, id="llama8b"),
])
def test_rope_store_kv_matches_reference(tokens, hq, hk, d, dtype, kv_dtype, qk_norm, is_neox):
    kv_dtype = kv_dtype or dtype
    blocks = max(8, tokens // 4 + 1)
    case = _case(tokens, hq, hk, d, d, dtype, kv_dtype, qk_norm, blocks=blocks)
    scales = (0.05, 0.07) if kv_dtype == FP8 else (1.0, 1.0)
    _check(case, is_neox, scales, rope_store_kv)


@pytest.mark.parametrize("qk_norm", [True, False], ids=["qk-norm", "no-norm"])
def test_backend_composes_single_ops_for_partial_rotary(qk_norm):
    """rot_dim < head_dim: the fused kernel does not take it; the backend's fallback must give
    the reference result and still write no input."""
    case = _case(6, 4, 2, 16, 8, BF16, BF16, qk_norm)
    _check(case, True, (1.0, 1.0), get_backend("triton").rope_store_kv)


def test_backend_takes_full_rotary_through_the_fused_kernel():
    case = _case(6, 4, 2, 16, 16, torch.float32, FP8, True)
    _check(case, False, (0.05, 0.07), get_backend("triton").rope_store_kv)
