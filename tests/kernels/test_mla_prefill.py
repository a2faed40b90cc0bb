"""Triton MLA prefill (up-projected: gather → kv_b_proj → varlen attention with qk N + R and
v V dims) vs the torch reference: chunks over cached prefixes, prefixes across page boundaries,
no prefix, a tail of the batch (first_seq), bf16 and fp8 latents, keys in several passes merged
by log-sum-exp; at R1's widths on the GPU."""
from __future__ import annotations

import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.mla_prefill import mla_prefill_attention
from kernel_helpers import DEVICE, gpu_param, paged_case, rel_err

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
TINY = (4, 16, 8, 16, 32)  # heads, nope, rope, v, kv_lora_rank
R1_TP8 = (16, 128, 64, 128, 512)


def _check(q_lens, ctx_lens, dims, kv_dtype, first_seq=0, seed=0, **kw):
    heads, nope, rope, v, lora = dims
    kv_scale = 0.05 if kv_dtype == FP8 else 1.0
    _, cache, _, meta = paged_case(q_lens, ctx_lens, 1, 1, lora + rope, 16, BF16, kv_dtype,
                                   kv_scale, seed=seed)
    cache = cache.squeeze(2)
    g = torch.Generator().manual_seed(seed + 1)
    q = (torch.randn(sum(q_lens[first_seq:]), heads, nope + rope, generator=g)).to(BF16).to(DEVICE)
    w = (torch.randn(heads * (nope + v), lora, generator=g) / lora ** 0.5).to(BF16).to(DEVICE)
    scale = (nope + rope) ** -0.5
    out = mla_prefill_attention(q, cache, meta, w, nope, scale, kv_scale, first_seq, **kw)
    ref = torch_ref.mla_prefill_attention(q, cache, meta, w, nope, scale, kv_scale, first_seq)
    assert out.shape == (q.shape[0], heads, v)
    err = rel_err(out, ref)
    assert err < 1.5e-2, err


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
def test_chunks_over_cached_prefixes(kv_dtype):
    """No prefix (7 of 7), prefixes ending on and across page boundaries, a long chunk (block
    of 64 queries), and one-query sequences among them."""
    _check([7, 5, 1, 40, 3], [7, 21, 16, 80, 35], TINY, kv_dtype)


def test_tail_of_the_batch_reads_its_own_rows():
    """first_seq: q holds the tail's tokens from row 0, sequence indices stay absolute."""
    _check([1, 1, 6, 9], [30, 12, 6, 41], TINY, BF16, first_seq=2)


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
def test_keys_in_passes_merge_to_the_whole(kv_dtype):
    """A workspace too small for the contexts: 64-position windows of keys, up-projected and
    attended one pass at a time and merged by log-sum-exp, equal attending over them all;
    sequences that end before a window, and queries whose keys all lie in later windows."""
    _check([20, 70, 3, 1], [150, 70, 200, 65], TINY, kv_dtype, workspace_bytes=1)
    _check([20, 70, 3, 1], [150, 70, 200, 65], TINY, kv_dtype, first_seq=1, workspace_bytes=1)


def test_key_window_bounds_the_workspace():
    from atom.kernels.triton.mla_prefill import key_window

    assert key_window([100, 30], 10, workspace_bytes=1300) == 100  # everything fits: one pass
    assert key_window([1000, 3000], 10, workspace_bytes=20_000) == 960  # 2 × 960 × 10 ≤ 20k
    assert key_window([1000, 3000], 10, workspace_bytes=100) == 64  # at least one key tile


def test_head_dims_that_are_not_powers_of_two():
    _check([5, 3], [9, 20], (3, 12, 8, 20, 24), BF16)


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("q_lens,ctx_lens,dims", [
    gpu_param([2048, 300, 37], [2048, 4000, 1037], R1_TP8, id="r1-tp8-prefill-chunks"),
    gpu_param([512, 1, 64], [8192, 1000, 64], (128, 128, 64, 128, 512), id="r1-tp1-8k-prefix"),
])
@pytest.mark.parametrize("workspace", [None, 64 << 20], ids=["default-workspace", "64MB-workspace"])
def test_r1_widths(q_lens, ctx_lens, dims, kv_dtype, workspace):
    kw = {"workspace_bytes": workspace} if workspace else {}
    _check(q_lens, ctx_lens, dims, kv_dtype, **kw)
