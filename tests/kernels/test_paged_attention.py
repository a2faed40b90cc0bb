"""Triton paged attention (varlen prefill with cached prefix; split-KV decode) vs the torch oracle."""
import dataclasses

import pytest
import torch

from atom.kernels import get_backend, torch_ref
from atom.kernels.triton.paged_decode_attention import decode_attention
from atom.kernels.triton.paged_prefill_attention import prefill_attention
from kernel_helpers import gpu_param, paged_case, rel_err

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def _check(fn, q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, window=None, **kw):
    scale_kv = 0.05 if kv_dtype == FP8 else 1.0
    q, kc, vc, meta = paged_case(q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, scale_kv)
    out = torch.full_like(q, float("nan"))  # poison: every element must be written
    out = fn(q, kc, vc, meta, d ** -0.5, scale_kv, scale_kv, window, **kw)
    ref = torch_ref.attention(q, kc, vc, meta, d ** -0.5, scale_kv, scale_kv, window)
    err = rel_err(out, ref)
    assert err < (1.5e-2 if dtype == BF16 else 1e-4), err


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("q_lens,ctx,hq,hk,d,page,dtype,window", [
    pytest.param([5, 1, 9], [5, 7, 20], 4, 2, 16, 4, torch.float32, None, id="small-prefix-f32"),
    pytest.param([3, 17], [11, 17], 2, 1, 32, 8, BF16, None, id="small-gqa-bf16"),
    pytest.param([6, 4], [14, 4], 2, 2, 16, 4, torch.float32, 5, id="small-window"),
    gpu_param([1024, 300, 37], [1024, 2000, 537], 32, 8, 128, 16, BF16, None, id="llama8b"),
    gpu_param([129, 700], [4000, 700], 16, 8, 128, 16, BF16, None, id="qwen0.6b"),
])
def test_prefill_attention(q_lens, ctx, hq, hk, d, page, dtype, window, kv_dtype):
    _check(prefill_attention, q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, window)


@pytest.mark.parametrize("splits", [1, 4], ids=["one-split", "four-splits"])
@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("ctx,hq,hk,d,page,window", [
    pytest.param([1, 17, 70], 4, 2, 16, 4, None, id="small"),
    pytest.param([9, 30], 4, 1, 32, 8, 7, id="small-window"),
    gpu_param([1024], 32, 8, 128, 16, None, id="llama8b-b1"),
    gpu_param(list(range(1, 4097, 64)), 32, 8, 128, 16, None, id="llama8b-b64"),
    gpu_param([1000, 3, 77], 16, 8, 128, 16, None, id="qwen0.6b"),
])
def test_decode_attention(ctx, hq, hk, d, page, window, kv_dtype, splits):
    _check(decode_attention, [1] * len(ctx), ctx, hq, hk, d, page, BF16, kv_dtype, window,
           splits=splits)


@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
@pytest.mark.parametrize("window", [None, 6], ids=["full", "window"])
def test_the_oracle_decodes_device_only_lengths_as_it_decodes_host_ones(kv_dtype, window):
    """A draft depth's context lengths follow drafts the host has not read: the oracle then
    masks every sequence's keys past its device length instead of looping over host lengths."""
    scale_kv = 0.05 if kv_dtype == FP8 else 1.0
    ctx = [1, 13, 30, 7]
    q, kc, vc, meta = paged_case([1] * len(ctx), ctx, 4, 2, 16, 4, torch.float32, kv_dtype,
                                 scale_kv)
    device_only = dataclasses.replace(meta, context_lens_cpu=None)
    want = torch_ref.attention(q, kc, vc, meta, 0.25, scale_kv, scale_kv, window)
    got = torch_ref.attention(q, kc, vc, device_only, 0.25, scale_kv, scale_kv, window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_backend_dispatches_decode_and_prefill():
    be = get_backend("triton")
    for q_lens, ctx in (([1, 1], [6, 9]), ([3, 1], [6, 9])):
        q, kc, vc, meta = paged_case(q_lens, ctx, 4, 2, 16, 4, torch.float32, torch.float32)
        out = be.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)
        ref = torch_ref.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)
        assert rel_err(out, ref) < 1e-4


@pytest.mark.parametrize("kv_dtype", [torch.float32, FP8], ids=["kv-f32", "kv-fp8"])
@pytest.mark.parametrize("q_lens,ctx,hq,hk,d,page", [
    pytest.param([1, 1, 12, 1, 3], [9, 30, 12, 4, 3], 4, 2, 16, 4, id="small"),
    gpu_param([1] * 64 + [1024, 1], list(range(40, 40 + 64 * 31, 31)) + [1024, 1500], 32, 8, 128,
              16, id="llama8b-mixed"),
])
def test_mixed_batch_routes_leading_decodes_through_the_decode_kernel(q_lens, ctx, hq, hk, d,
                                                                       page, kv_dtype):
    dtype = torch.float32 if kv_dtype == torch.float32 and len(q_lens) < 10 else BF16
    scale_kv = 0.05 if kv_dtype == FP8 else 1.0
    q, kc, vc, meta = paged_case(q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, scale_kv)
    meta.num_decode_seqs = next(i for i, n in enumerate(q_lens) if n != 1)
    out = get_backend("triton").attention(q, kc, vc, meta, d ** -0.5, scale_kv, scale_kv)
    ref = torch_ref.attention(q, kc, vc, meta, d ** -0.5, scale_kv, scale_kv)
    assert not out.isnan().any()
    assert rel_err(out, ref) < (1.5e-2 if dtype == BF16 else 1e-4)


@pytest.mark.parametrize("splits", [2, 16], ids=["two-splits", "sixteen-splits"])
def test_decode_merges_every_split(splits):
    """The merge launch takes every split's partial: splits past a short context, and a padding
    row of length 0, give empty ones."""
    for ctx in ([3, 1, 40], [70, 1, 5]):
        q, kc, vc, meta = paged_case([1] * 3, ctx, 4, 2, 16, 4, torch.float32, torch.float32)
        meta.context_lens[1] = 0  # a CUDA-graph padding row
        out = decode_attention(q, kc, vc, meta, 0.25, splits=splits)
        ref = torch_ref.attention(q, kc, vc, meta, 0.25)
        rows = [0, 2]
        assert rel_err(out[rows], ref[rows]) < 1e-4
        assert torch.equal(out[1], torch.zeros_like(out[1]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kv_dtype", [BF16, FP8], ids=["kv-bf16", "kv-fp8"])
def test_decode_graph_replays_with_other_contexts(kv_dtype):
    """Captured once at batch 1 (16 splits at Qwen3-0.6B's 8 kv heads, then the merge launch),
    replayed over contexts read from the device: every replay merges right."""
    scale_kv = 0.05 if kv_dtype == FP8 else 1.0
    q, kc, vc, meta = paged_case([1], [4000], 16, 8, 128, 16, BF16, kv_dtype, scale_kv)
    meta.max_context_len = meta.block_tables.shape[1]
    decode_attention(q, kc, vc, meta, 128 ** -0.5, scale_kv, scale_kv)  # compile outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode_attention(q, kc, vc, meta, 128 ** -0.5, scale_kv, scale_kv)
    for ctx in (4000, 1, 17, 129, 2048, 3999):
        meta.context_lens.fill_(ctx)
        for _ in range(3):
            graph.replay()
        meta.context_lens_cpu = [ctx]
        ref = torch_ref.attention(q, kc, vc, meta, 128 ** -0.5, scale_kv, scale_kv)
        assert rel_err(out, ref) < 1.5e-2, ctx
