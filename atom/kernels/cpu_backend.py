"""The `cpu` kernel backend: the torch reference's ops, with quantized weights kept quantized
(cpu_woq.py) and decode attention batched over sequences.

On the CPU every torch op costs microseconds of dispatch, so per-step host work is op count:
the reference attention runs ~15 ops per sequence per layer, which at 8 decoding sequences and
30 layers is more than the matmuls. Here all one-query sequences attend in one gather and one
scaled_dot_product_attention per layer. Everything stays float32 except what the quantized
kernels compute in bf16; `runtime.kernels=torch` is the float32 oracle it is tested against.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from atom.kernels import cpu_woq, torch_ref
from atom.kernels.backend import register
from atom.kernels.metadata import AttentionMetadata
from atom.kernels.quantized_weight import QuantizedWeight


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_tables: torch.Tensor, context_lens: torch.Tensor, max_context: int,
                     scale: float, k_scale: float, v_scale: float,
                     sliding_window: Optional[int]) -> torch.Tensor:
    """One query per sequence: q [B, Hq, D] over each sequence's first context_lens keys.
    The padded block tables gather every sequence's pages at once; a GQA group's queries ride
    as the query-length axis of one SDPA, so K/V are never repeated per head."""
    b, hq, d = q.shape
    bs, hk = k_cache.shape[1], k_cache.shape[2]
    nblocks = -(-max_context // bs)
    pages = block_tables[:, :nblocks].clamp(min=0).long()
    k = torch_ref._dequant(k_cache[pages].view(b, nblocks * bs, hk, d), k_scale, q.dtype)
    v = torch_ref._dequant(v_cache[pages].view(b, nblocks * bs, hk, d), v_scale, q.dtype)
    kpos = torch.arange(nblocks * bs)
    last = (context_lens.long() - 1).unsqueeze(1)
    mask = kpos <= last
    if sliding_window is not None:
        mask &= kpos > last - sliding_window
    o = F.scaled_dot_product_attention(q.view(b, hk, hq // hk, d), k.transpose(1, 2),
                                       v.transpose(1, 2), attn_mask=mask.view(b, 1, 1, -1),
                                       scale=scale)
    return o.reshape(b, hq, d)


@register("cpu")
class CpuBackend(torch_ref.TorchBackend):
    name = "cpu"

    def __init__(self) -> None:
        # (shape, planes, group) → rows up to which the int4 kernel won: one timing per shape.
        self._int4_rows: dict[tuple, int] = {}

    def prepare_weight(self, qw: QuantizedWeight) -> Optional[Any]:
        if qw.codes.is_floating_point():
            return None
        return cpu_woq.prepare(qw, self._int4_rows)

    def linear(self, x, weight, bias=None):
        if isinstance(weight, torch.Tensor):
            return F.linear(x, weight, bias)
        return weight(x, bias)

    def silu_and_mul_linear(self, x, weight, bias=None):
        return self.linear(torch_ref.silu_and_mul(x), weight, bias)

    def attention(self, q, k_cache, v_cache, meta: AttentionMetadata, scale, k_scale, v_scale,
                  sliding_window=None):
        n = meta.num_seqs if meta.is_decode else meta.num_decode_seqs
        if n < 2:
            return torch_ref.attention(q, k_cache, v_cache, meta, scale, k_scale, v_scale,
                                       sliding_window)
        max_ctx = max(meta.context_lens_cpu[:n]) if meta.context_lens_cpu else meta.max_context_len
        head = decode_attention(q[:n], k_cache, v_cache, meta.block_tables[:n],
                                meta.context_lens[:n], max_ctx, scale, k_scale, v_scale,
                                sliding_window)
        if n == meta.num_seqs:
            return head
        rest = torch_ref.attention(q[n:], k_cache, v_cache, _tail(meta, n), scale, k_scale,
                                   v_scale, sliding_window)
        return torch.cat([head, rest])


def _tail(meta: AttentionMetadata, n: int) -> AttentionMetadata:
    """The sequences after the first n (their queries start at offset 0 of q[n:])."""
    q_lens = meta.q_lens_cpu[n:] if meta.q_lens_cpu else None
    ctx = meta.context_lens_cpu[n:] if meta.context_lens_cpu else None
    return AttentionMetadata(meta.cu_seqlens_q[n:] - n, meta.context_lens[n:],
                             meta.block_tables[n:], meta.slot_mapping[n:], meta.max_q_len,
                             meta.max_context_len, False, q_lens, ctx)
