"""The `cpu` backend against the float32 torch reference, op by op: quantized linears (both
kernels, every packing), batched decode attention, and the fused rotary + KV write; each seam
both through its C kernel (cpu_native.py) and through its torch ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

from atom.kernels import cpu_backend, cpu_woq, get_backend, torch_ref
from atom.kernels.metadata import AttentionMetadata
from atom.loader.gguf_blocks import decode


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


# bf16 inputs and outputs: ~2^-9 relative per element, accumulated in float32.
BF16_TOL = 1e-2


def cpu(native: bool) -> cpu_backend.CpuBackend:
    be = cpu_backend.CpuBackend(native=native)
    if native and be._native is None:
        pytest.skip("no C compiler: the cpu backend's C kernels cannot be built here")
    return be


with_native = pytest.mark.parametrize("native", [True, False], ids=["c", "torch-ops"])


@pytest.mark.parametrize("qt", [T.Q4_0, T.Q4_1, T.Q5_1, T.Q8_0], ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 5, 40])
def test_quantized_linear_matches_dequantized_float(qt, rows):
    rng = np.random.default_rng(0)
    n, k = 96, 256
    qw = decode(quantize(rng.standard_normal((n, k)).astype(np.float32), qt), qt, (n, k))
    x = torch.randn(rows, k)
    bias = torch.randn(n)
    ref = torch.nn.functional.linear(x, qw.dequantize(), bias)
    int4 = cpu_woq.int4_planes(qw)
    assert int4 is not None and int4.planes == (2 if qt in (T.Q5_1, T.Q8_0) else 1)
    dense = cpu_woq.DenseBf16(qw.dequantize().to(torch.bfloat16))
    for limit in (0, 64):  # dense bf16 only (oneDNN's blocked layout where it runs bf16), int4 only
        out = cpu_woq.CpuQuantizedLinear(int4, dense, limit)(x, bias)
        assert out.dtype == x.dtype and rel_err(out, ref) < BF16_TOL, (limit, rel_err(out, ref))


def test_kernels_are_chosen_once_per_shape_and_groups_it_cannot_pack_go_dense():
    rng = np.random.default_rng(0)
    be = get_backend("cpu")
    w = quantize(rng.standard_normal((32, 256)).astype(np.float32), T.Q4_1)
    first, second = (be.prepare_weight(decode(w, T.Q4_1, (32, 256))) for _ in range(2))
    be.weights_prepared()
    assert list(be._int4_rows) == [((32, 256), 1, 32)]
    assert first.int4_max_rows == second.int4_max_rows == be._int4_rows[((32, 256), 1, 32)]
    assert (first.int4 is None) == (first.int4_max_rows == 0)
    q6 = rng.integers(0, 256, (32 * 256 // 256, 210), dtype=np.uint8)
    q6[:, 208:210] = np.full((q6.shape[0], 1), 0.01, np.float16).view(np.uint8)
    assert cpu_woq.int4_planes(decode(q6.reshape(32, -1), T.Q6_K, (32, 256))) is None  # groups of 16


def _paged(ctx_lens: list[int], hq: int, hk: int, d: int, page: int):
    g = torch.Generator().manual_seed(0)
    nblk = [-(-c // page) for c in ctx_lens]
    pool = torch.randperm(sum(nblk) + 2, generator=g)
    k_cache = torch.randn(pool.numel(), page, hk, d, generator=g)
    v_cache = torch.randn(pool.numel(), page, hk, d, generator=g)
    width = max(nblk)
    tables = torch.full((len(ctx_lens), width), -1, dtype=torch.int32)
    start = 0
    for i, n in enumerate(nblk):
        tables[i, :n] = pool[start:start + n].int()
        start += n
    b = len(ctx_lens)
    meta = AttentionMetadata(
        cu_seqlens_q=torch.arange(b + 1, dtype=torch.int32),
        context_lens=torch.tensor(ctx_lens, dtype=torch.int32), block_tables=tables,
        slot_mapping=torch.zeros(b, dtype=torch.long), max_q_len=1,
        max_context_len=max(ctx_lens), is_decode=True, q_lens_cpu=[1] * b,
        context_lens_cpu=list(ctx_lens))
    return torch.randn(b, hq, d, generator=g), k_cache, v_cache, meta


@with_native
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("ctx,in_place", [([1, 7, 16, 33], False), ([21], False), ([21], True)],
                         ids=["4-seqs", "1-seq", "1-seq-consecutive-pages"])  # 1: heads batched
def test_batched_decode_attention_matches_reference(window, ctx, in_place, native):
    q, kc, vc, meta = _paged(ctx, hq=6, hk=2, d=16, page=8)
    if in_place:  # pages 2, 3, 4 of the pool: read where they lie, not gathered
        meta.block_tables[0] = torch.arange(2, 2 + meta.block_tables.shape[1])
    be = cpu(native)
    if not native:
        assert (be._decode_gather(meta, len(ctx), kc, window).first_slot is not None) == in_place
    out = be.attention(q, kc, vc, meta, 0.25, 1.0, 1.0, window)
    ref = torch_ref.attention(q, kc, vc, meta, 0.25, 1.0, 1.0, window)
    assert rel_err(out, ref) < 1e-6


def test_caches_the_c_kernels_do_not_take_run_the_torch_ops():
    """A bf16 cache (kv_cache.dtype=bf16 on a float32 model) is not the C attention's: the
    backend with C kernels still matches the reference over it."""
    q, kc, vc, meta = _paged([1, 7, 16, 33], hq=6, hk=2, d=16, page=8)
    kc, vc = kc.bfloat16(), vc.bfloat16()
    be = cpu(True)
    assert not be._native_caches(kc, vc)
    out = be.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)
    assert rel_err(out, torch_ref.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)) < 1e-6


@pytest.mark.parametrize("matmul_rows", [1, 0, None],
                         ids=["matmul-at-one-row", "elementwise", "c"])
@pytest.mark.parametrize("t", [1, 3])  # one row: its views' row strides are arbitrary
@pytest.mark.parametrize("rot", [12, 16], ids=["partial", "full"])
def test_rope_store_kv_matches_reference(t, rot, matmul_rows, monkeypatch):
    if matmul_rows is not None:
        monkeypatch.setattr(cpu_backend, "ROPE_MATMUL_ROWS", matmul_rows)
    hq, hk, d, page = 4, 2, 16, 4
    qkv = torch.randn(t, (hq + 2 * hk) * d)
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    q, k, v = q.reshape(-1, hq, d), k.reshape(-1, hk, d), v.reshape(-1, hk, d)  # as the model does
    assert cpu_backend._adjacent_heads(q, k) is not None  # the one-rotation path, not the fallback
    positions = torch.tensor([0, 5, 9])[:t]
    cos_sin = torch.randn(16, rot)
    slots = torch.tensor([3, -1, 6])[:t]
    results = []
    for be in (cpu(matmul_rows is None), get_backend("torch")):
        kc, vc = torch.zeros(3, page, hk, d), torch.zeros(3, page, hk, d)
        qr = be.rope_store_kv(positions, q, k, v, kc, vc, slots, 1.0, 1.0, cos_sin, True)
        results.append((qr, kc, vc))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-6)


def test_rope_tables_are_shared_by_equal_layers_only():
    """Every layer holds its own copy of one rotary table: the cpu backend builds the step's
    rows once for equal copies, and never reuses them for a table that differs."""
    hq, hk, d = 2, 1, 8
    q, k, v = torch.randn(1, hq + 2 * hk, d).split([hq, hk, hk], dim=1)
    positions, slots = torch.tensor([3]), torch.tensor([1])
    table = torch.randn(8, d)
    ops, ref = cpu(False), get_backend("torch")
    for cache in (table, table.clone(), table * 0.5):
        out = [be.rope_store_kv(positions, q, k, v, torch.zeros(1, 4, hk, d),
                                torch.zeros(1, 4, hk, d), slots, 1.0, 1.0, cache, True)
               for be in (ops, ref)]
        assert torch.allclose(out[0], out[1], atol=1e-6)
    assert len({id(c) for _, c in ops._rope_alias.values()}) == 2


@pytest.mark.parametrize("rows", [1, 16, 256])  # decode, the reorder's hint, a prefill chunk
def test_reordered_dense_bf16_equals_plain_linear(rows):
    w = torch.randn(96, 256).to(torch.bfloat16)
    x = torch.randn(rows, 256).to(torch.bfloat16)
    assert torch.equal(cpu_woq.DenseBf16(w)(x), torch.nn.functional.linear(x, w))


def _lone_sequence(ctx: int, page: int, pages: int):
    """One decoding sequence on consecutive pages 1.. of a pool (read in place)."""
    meta = AttentionMetadata(
        cu_seqlens_q=torch.arange(2, dtype=torch.int32),
        context_lens=torch.tensor([ctx], dtype=torch.int32),
        block_tables=torch.arange(1, 1 + pages, dtype=torch.int32).unsqueeze(0),
        slot_mapping=torch.tensor([page + ctx - 1]), max_q_len=1, max_context_len=ctx,
        is_decode=True, q_lens_cpu=[1], context_lens_cpu=[ctx])
    return meta


def test_in_place_views_follow_the_cache_across_steps():
    """A lone sequence's cache views are kept between steps: what later steps write into the
    cache is what they attend over, and a step that grows the run by a page gets new views."""
    hq, hk, d, page = 6, 2, 16, 4
    g = torch.Generator().manual_seed(0)
    kc, vc = torch.zeros(5, page, hk, d), torch.zeros(5, page, hk, d)
    be, ref = cpu(False), get_backend("torch")
    views = []
    for ctx in (2, 3, 4, 5):  # the fifth key opens the run's second page
        meta = _lone_sequence(ctx, page, 3)
        k, v = torch.randn(2, 1, hk, d, generator=g)
        be.store_kv(k, v, kc, vc, meta.slot_mapping, 1.0, 1.0)
        q = torch.randn(1, hq, d, generator=g)
        out = be.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)
        assert rel_err(out, ref.attention(q, kc, vc, meta, 0.25, 1.0, 1.0)) < 1e-6, ctx
        views.append(be._runs[id(kc)][3])
    assert views[0] is views[1] is views[2] and views[3] is not views[2]


def _quantized_linear(n: int, k: int, qt=T.Q4_1):
    rng = np.random.default_rng(1)
    qw = decode(quantize(rng.standard_normal((n, k)).astype(np.float32), qt), qt, (n, k))
    lin = cpu_woq.CpuQuantizedLinear(cpu_woq.int4_planes(qw),
                                     cpu_woq.DenseBf16(qw.dequantize().to(torch.bfloat16)), 8)
    return lin, qw.dequantize()


@with_native
@pytest.mark.parametrize("x_dtype,first", [(torch.float32, False), (torch.bfloat16, False),
                                           (torch.float32, True)],
                         ids=["f32", "bf16-block-out", "first-layer"])  # the embedding's f32
@pytest.mark.parametrize("rows", [1, 5, 70])  # int4, dense, past the buffered rows
@pytest.mark.parametrize("with_bias", [False, True])
def test_norm_seam_matches_the_unfused_reference(x_dtype, rows, with_bias, first, native):
    """The norm's weight applied on the way into bf16 and 1/rms after the matmul is the
    unfused norm-then-linear, in float32; the residual stream h is exact."""
    lin, w = _quantized_linear(96, 256)
    g = torch.Generator().manual_seed(2)
    x = (3 * torch.randn(rows, 256, generator=g)).to(x_dtype)
    residual = None if first else torch.randn(rows, 256, generator=g)
    norm_w = torch.rand(256, generator=g) + 0.5
    bias = torch.randn(96, generator=g) if with_bias else None
    y, h = cpu(native).add_rms_norm_linear(x, residual, norm_w, 1e-5, lin, bias)
    ref_y, ref_h = get_backend("torch").add_rms_norm_linear(x.float(), residual, norm_w, 1e-5,
                                                            w, bias)
    assert y.dtype == torch.float32 and torch.equal(h, ref_h)
    assert rel_err(y, ref_y) < BF16_TOL


@with_native
@pytest.mark.parametrize("rows", [1, 5])
def test_gated_seam_leaves_bf16_and_its_buffer_never_aliases_an_output(rows, native):
    lin, w = _quantized_linear(96, 256)
    be = cpu(native)
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(rows, 512, generator=g) for _ in range(2)]
    outs = [be.silu_and_mul_linear(x, lin) for x in xs]  # the second reuses the first's buffer
    for x, out in zip(xs, outs):
        ref = torch.nn.functional.linear(torch_ref.silu_and_mul(x), w)
        assert out.dtype == torch.bfloat16 and rel_err(out, ref) < BF16_TOL


@pytest.mark.parametrize("rows", [1, 5])
def test_block_output_projection_leaves_bf16_for_the_residual_add(rows):
    """A block's last projection (o_proj) in bf16 on the cpu backend, the float32 oracle's
    dtype on the torch backend; the residual add that follows promotes it to float32."""
    lin, w = _quantized_linear(96, 256)
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(4))
    out = get_backend("cpu").block_output_linear(x, lin)
    ref = get_backend("torch").block_output_linear(x, w)
    assert out.dtype == torch.bfloat16 and ref.dtype == torch.float32
    assert rel_err(out, ref) < BF16_TOL
    residual = torch.randn(rows, 96)
    assert (out + residual).dtype == torch.float32
