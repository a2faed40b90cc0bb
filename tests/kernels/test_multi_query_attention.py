"""The multi-query (verify) attention kernel against the torch oracle: 1 + k queries a
sequence, causal among themselves over a paged prefix, GQA groups read once, split or not."""
import pytest
import torch

from atom.kernels import get_backend, torch_ref
from atom.kernels.triton import paged_multi_query_attention as mq
from kernel_helpers import gpu_param, paged_case, rel_err

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def _check(q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, window=None, splits=None):
    scale_kv = 0.05 if kv_dtype == FP8 else 1.0
    q, kc, vc, meta = paged_case(q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, scale_kv)
    out = mq.multi_query_attention(q, kc, vc, meta, d ** -0.5, scale_kv, scale_kv, window,
                                   splits=splits)
    ref = torch_ref.attention(q, kc, vc, meta, d ** -0.5, scale_kv, scale_kv, window)
    assert not out.isnan().any()
    assert rel_err(out, ref) < (1.5e-2 if dtype == BF16 else 1e-4)


@pytest.mark.parametrize("splits", [1, 3], ids=["one-split", "three-splits"])
@pytest.mark.parametrize("kv_dtype", [torch.float32, FP8], ids=["kv-f32", "kv-fp8"])
@pytest.mark.parametrize("q_lens,ctx,hq,hk,d,page,window", [
    pytest.param([4, 4, 4], [4, 19, 70], 4, 2, 16, 4, None, id="verify-k3"),
    pytest.param([2, 1, 5, 8], [9, 30, 12, 40], 4, 1, 32, 8, None, id="mixed-lengths-group4"),
    pytest.param([3, 6], [20, 33], 2, 2, 16, 4, 7, id="window"),
    gpu_param([8], [1024], 32, 8, 128, 16, None, id="llama8b-b1-k7"),
    gpu_param([4] * 32, list(range(100, 4100, 125)), 32, 8, 128, 16, None, id="llama8b-b32-k3"),
    gpu_param([2] * 8, [3000] * 8, 16, 8, 128, 16, None, id="qwen0.6b-k1"),
])
def test_multi_query_attention_matches_the_oracle(q_lens, ctx, hq, hk, d, page, window,
                                                  kv_dtype, splits):
    dtype = BF16 if torch.cuda.is_available() and kv_dtype == FP8 else torch.float32
    _check(q_lens, ctx, hq, hk, d, page, dtype, kv_dtype, window, splits)


def test_a_padding_row_of_context_zero_gives_zeros():
    """A CUDA graph's pad rows: q_len queries, context 0, no keys."""
    q, kc, vc, meta = paged_case([3, 3], [7, 3], 4, 2, 16, 4, torch.float32, torch.float32)
    meta.context_lens[1] = 0
    for splits in (1, 4):
        out = mq.multi_query_attention(q, kc, vc, meta, 0.25, splits=splits)
        assert torch.equal(out[3:], torch.zeros_like(out[3:]))


def test_the_backend_sends_verify_batches_here_and_longer_chunks_to_prefill():
    """Decodes beside verifies too; an all-decode batch is the decode kernel's."""
    be = get_backend("triton")
    for q_lens, ctx, here in (([4, 4], [6, 9], True), ([2, 9], [6, 12], False),
                              ([1, 3], [6, 9], True), ([1, 1], [6, 9], False)):
        q, kc, vc, meta = paged_case(q_lens, ctx, 4, 2, 16, 4, torch.float32, torch.float32)
        meta.num_decode_seqs = next((i for i, n in enumerate(q_lens) if n != 1), 0)
        assert mq.takes(meta) == here
        out = be.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)
        assert rel_err(out, torch_ref.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)) < 1e-4
