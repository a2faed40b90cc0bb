"""Shared builders for kernel tests: shapes, paged caches, and the error measure."""
from __future__ import annotations

import os

import pytest
import torch

from atom.kernels.metadata import AttentionMetadata

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
GPU = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]


def gpu_param(*values, id: str):
    """A parametrize case at real model shapes: GPU only, marked `gpu`."""
    return pytest.param(*values, id=id, marks=GPU)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere fails loudly."""
    assert not torch.isnan(out).any(), "NaN in kernel output"
    o, r = out.double(), ref.double()
    return ((o - r).norm() / r.norm().clamp_min(1e-30)).item()


def tol(dtype: torch.dtype) -> float:
    return 1.5e-2 if dtype in (torch.bfloat16, torch.float16) else 2e-4


def paged_case(q_lens: list[int], ctx_lens: list[int], n_q_heads: int, n_kv_heads: int,
               head_dim: int, page: int, dtype: torch.dtype, kv_dtype: torch.dtype,
               kv_scale: float = 1.0, extra_blocks: int = 3, seed: int = 0):
    """Random q and a filled paged cache whose blocks are scattered (a shuffled pool), so an
    indexing slip shows. Returns (q, k_cache, v_cache, meta)."""
    g = torch.Generator().manual_seed(seed)
    dev = DEVICE
    nblk = [-(-c // page) for c in ctx_lens]
    total = sum(nblk) + extra_blocks
    perm = torch.randperm(total, generator=g)
    width = max(nblk) + 1
    tables = torch.full((len(ctx_lens), width), -1, dtype=torch.int32)
    used = 0
    for i, n in enumerate(nblk):
        tables[i, :n] = perm[used:used + n].int()
        used += n
    shape = (total, page, n_kv_heads, head_dim)
    k_cache = _cache(torch.randn(shape, generator=g), kv_dtype, kv_scale).to(dev)
    v_cache = _cache(torch.randn(shape, generator=g), kv_dtype, kv_scale).to(dev)
    T = sum(q_lens)
    q = torch.randn((T, n_q_heads, head_dim), generator=g).to(dtype).to(dev)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), dtype=torch.int32)
    slots = []
    for i, (ql, cl) in enumerate(zip(q_lens, ctx_lens)):
        for p in range(cl - ql, cl):
            slots.append(int(tables[i, p // page]) * page + p % page)
    meta = AttentionMetadata(
        cu_seqlens_q=cu.to(dev), context_lens=torch.tensor(ctx_lens, dtype=torch.int32).to(dev),
        block_tables=tables.to(dev), slot_mapping=torch.tensor(slots, dtype=torch.int64).to(dev),
        max_q_len=max(q_lens), max_context_len=max(ctx_lens),
        is_decode=all(ql == 1 for ql in q_lens), q_lens_cpu=list(q_lens), context_lens_cpu=list(ctx_lens))
    return q, k_cache, v_cache, meta


def _cache(x: torch.Tensor, kv_dtype: torch.dtype, scale: float) -> torch.Tensor:
    if kv_dtype == torch.float8_e4m3fn:
        return (x / scale).clamp(-448, 448).to(kv_dtype)
    return x.to(kv_dtype)


# Triton's CPU interpreter rounds f32→bf16 by truncation (hardware rounds to nearest even), so
# results the GPU must reproduce bit for bit are compared within a bf16 ulp when interpreted.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def assert_same_rounding(out: torch.Tensor, ref: torch.Tensor) -> None:
    if INTERPRETED:
        assert rel_err(out, ref) < 8e-3
    else:
        assert torch.equal(out, ref)


def assert_cache_close(out: torch.Tensor, ref: torch.Tensor) -> None:
    """KV-cache contents written from values the kernel and the reference may round one ulp
    apart. fp8 e4m3: every mismatch within one e4m3 ulp of the reference, or (interpreted only)
    the interpreter's f32→e4m3 slip that drops a mantissa carry (32 comes out as 16), and few of
    them (more when interpreted: its f32→bf16 truncates, so the bf16 inputs already differ);
    other dtypes: relative error within the dtype's tolerance."""
    if out.dtype != torch.float8_e4m3fn:
        assert rel_err(out, ref) < tol(out.dtype)
        return
    o, r = out.float(), ref.float()
    bad = o != r
    ulp = torch.exp2(torch.floor(torch.log2(r.abs().clamp_min(2 ** -6))) - 3)
    ok = (o - r).abs() <= ulp
    if INTERPRETED:
        ok |= 2 * o == r
    assert not (bad & ~ok).any()
    assert bad.float().mean() < (0.2 if INTERPRETED else 0.1), bad.float().mean().item()
