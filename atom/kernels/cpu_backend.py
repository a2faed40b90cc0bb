"""The `cpu` kernel backend: the torch reference's ops, with quantized weights kept quantized
(cpu_woq.py) and decode attention batched over sequences.

On the CPU every torch op costs microseconds of dispatch, so per-step host work is op count:
the reference attention runs ~15 ops per sequence per layer, which at 8 decoding sequences and
30 layers is more than the matmuls. Here all one-query sequences attend in one gather per cache
and one to three ops per layer. Everything stays float32 except what the quantized kernels
compute in bf16 and what crosses between two of them (cpu_handoff.py: the gated MLP's
activation, and the block output it leaves for the residual add); `runtime.kernels=torch` is
the float32 oracle it is tested against.

Where the machine has a C compiler each seam around the quantized kernels is one C call
(cpu_native.py): the norm into bf16, the scale after the projection, the gated activation,
rotary with the KV write, and decode attention reading the paged float32 cache in place (no
gather). A decode step of the embedded default went from 1,097 torch ops to 579 and its
non-matmul CPU time from ~5.9 to ~4.9 ms at one thread (research/probes/cpu_decode_ops.py). The torch ops below stay for what the
C kernels do not take (other dtypes, q/k norms, GPT-J rotary) and where there is no compiler.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from atom.kernels import cpu_native, cpu_woq, torch_ref
from atom.kernels.cpu_handoff import Bf16Handoff
from atom.kernels.backend import add_rms_norm_linear_unfused, rope_store_kv_unfused
from atom.kernels.metadata import AttentionMetadata
from atom.kernels.fp8_reference import EmulatedFp8Linear
from atom.kernels.fp8_weight import Fp8Weight
from atom.kernels.quantized_weight import Quantized


RunViews = dict[int, tuple[torch.Tensor, int, int, torch.Tensor]]


class DecodeGather:
    """What every layer's decode attention shares in one step: the pages to gather and the
    mask of real keys (built once per step, not once per layer)."""

    def __init__(self, block_tables: torch.Tensor, context_lens: torch.Tensor, max_context: int,
                 block_size: int, sliding_window: Optional[int], runs: RunViews) -> None:
        nblocks = -(-max_context // block_size)
        self.pages = block_tables[:, :nblocks].clamp(min=0).long().reshape(-1)
        self.keys = nblocks * block_size
        kpos = torch.arange(self.keys)
        last = (context_lens.long() - 1).unsqueeze(1)
        keep = kpos <= last
        if sliding_window is not None:
            keep &= kpos > last - sliding_window
        # Additive, [B, 1, keys]: each layer adds it inside its first matmul.
        self.bias = torch.zeros(keep.shape).masked_fill_(~keep, float("-inf")).unsqueeze(1)
        # One sequence whose pages follow each other in the pool (a lone stream's usually do):
        # its keys are one run of cache slots from here, read in place, not gathered.
        self.first_slot: Optional[int] = None
        p = self.pages
        if block_tables.shape[0] == 1 and (nblocks == 1 or bool((p[1:] - p[:-1] == 1).all())):
            self.first_slot = int(p[0]) * block_size
        self.runs = runs

    def keys_of(self, cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """cache's keys (or values) of every sequence, [B * keys, Hk, D]; slots is the cache
        viewed as [num_blocks * block_size, Hk, D]."""
        if self.first_slot is not None:
            return slots.narrow(0, self.first_slot, self.keys)
        return cache.index_select(0, self.pages).view(-1, *cache.shape[2:])

    def read(self, cache: torch.Tensor, slots: torch.Tensor, scale: float, dtype: torch.dtype,
             keys: bool) -> torch.Tensor:
        """cache's keys (keys=True) or values in dtype, laid out for decode_attention: one
        sequence's as [Hk, D, keys] (keys) or [Hk, keys, D] (values), B sequences' as
        [B, Hk, keys, D]. A run read in place keeps its view across steps until it moves or
        grows by a page: two ops per cache and layer saved on the steps in between."""
        if self.first_slot is None or cache.dtype != dtype:
            return self._layout(_read(self.keys_of(cache, slots), scale, dtype), keys)
        hit = self.runs.get(id(cache))
        if hit is None or hit[0] is not cache or hit[1] != self.first_slot or hit[2] != self.keys:
            view = self._layout(slots.narrow(0, self.first_slot, self.keys), keys)
            self.runs[id(cache)] = hit = (cache, self.first_slot, self.keys, view)
        return hit[3]

    def _layout(self, x: torch.Tensor, keys: bool) -> torch.Tensor:
        b = self.bias.shape[0]
        if b == 1:
            return x.permute(1, 2, 0) if keys else x.transpose(0, 1)
        return x.view(b, self.keys, *x.shape[1:]).transpose(1, 2)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: DecodeGather,
                     scale: float) -> torch.Tensor:
    """One query per sequence: q [B, Hq, D] over each sequence's first context_lens keys, k
    and v as DecodeGather.read lays them out (one index_select per cache gathers every
    sequence's pages; one sequence on consecutive pages reads them in place). With one
    sequence its KV heads are the batch of three BLAS ops (29 against 51 us per layer for one
    batched matmul per head, SmolLM2's 9 query and 3 KV heads); with more, the pages go to
    scaled_dot_product_attention as [B, Hk, keys, D] views, each GQA group sharing its KV head
    (68 against 109 us per layer at 8 sequences of 48 keys, 1.23 against 1.45 ms at 32 of
    150)."""
    b, hq, d = q.shape
    if b == 1:
        hk = k.shape[0]
        scores = torch.baddbmm(g.bias, q.view(hk, hq // hk, d), k, alpha=scale)
        return torch.bmm(torch.softmax(scores, dim=-1), v).view(1, hq, d)
    out = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=g.bias.unsqueeze(1),
                                         scale=scale, enable_gqa=k.shape[1] != hq)
    return out.view(b, hq, d)


def _read(x: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """Cached values in dtype (a call saved per layer when the cache already is dtype)."""
    return x if x.dtype == dtype else torch_ref._dequant(x, scale, dtype)


def _write(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    return x if x.dtype == dtype else torch_ref._quant(x, dtype, scale)


def rope_tables(positions: torch.Tensor, cos_sin_cache: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """This step's rows of the cache as [T, 1, rot] multipliers of x and of x with its halves
    swapped: (cos | cos) and (-sin | sin), built once per step for every layer."""
    cos, sin = cos_sin_cache.index_select(0, positions.long()).unsqueeze(1).chunk(2, dim=-1)
    return torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)


def rope_matrix(cos: torch.Tensor, sin: torch.Tensor, dim: int) -> torch.Tensor:
    """rope_tables' multipliers as one [T, dim, dim] matrix per row: x @ m is _neox_rotate's
    x * cos + roll(x) * sin (the dims past rot pass through)."""
    t, rot = cos.shape[0], cos.shape[-1]
    m = torch.zeros(t, dim, dim, dtype=cos.dtype)
    j = torch.arange(rot)
    m[:, j, j] = cos[:, 0]
    m[:, (j + rot // 2) % rot, j] = sin[:, 0]
    if rot < dim:
        p = torch.arange(rot, dim)
        m[:, p, p] = 1.0
    return m


def _neox_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] rotated in its first rot = cos.shape[-1] dims (NeoX halves layout), cos and
    sin from rope_tables: x * cos + roll(x) * sin, three ops instead of nine."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return torch.addcmul(x * cos, x.roll(rot // 2, dims=-1), sin)
    xr = x[..., :rot]
    return torch.cat([torch.addcmul(xr * cos, xr.roll(rot // 2, dims=-1), sin), x[..., rot:]],
                     dim=-1)


def _adjacent_heads(q: torch.Tensor, k: torch.Tensor) -> Optional[torch.Tensor]:
    """q and k as one [T, Hq + Hk, D] view when k's heads follow q's in memory (both are
    views of one qkv projection): one rotation instead of two."""
    t, hq, d = q.shape
    if (k.shape[0] != t or k.shape[2] != d or q.stride()[1:] != (d, 1) or k.stride()[1:] != (d, 1)
            or (t > 1 and q.stride(0) != k.stride(0))
            or k.data_ptr() != q.data_ptr() + hq * d * q.element_size()):
        return None
    return q.as_strided((t, hq + k.shape[1], d), q.stride())


# One row (a lone stream's decode): a bmm of batch one never enters an OpenMP region; with more
# rows torch's CPU bmm runs its batch in parallel (at 2 threads 85-400 us on a shared box,
# against 8.7 elementwise at 8 rows), and by 16 the elementwise ops win at 1 thread too.
ROPE_MATMUL_ROWS = 1


class CpuBackend(torch_ref.TorchBackend):
    name = "cpu"

    def __init__(self, native: bool = True) -> None:
        """native: use the C kernels (cpu_native.py) where they apply; False keeps every seam
        in torch ops (what the C kernels are tested against)."""
        self._native = cpu_native.load() if native else None
        # Prepared since the last weights_prepared, and then (shape, planes, group) → rows up
        # to which the int4 kernel won.
        self._unchosen: list[cpu_woq.CpuQuantizedLinear] = []
        self._int4_rows: dict[tuple, int] = {}
        # Per-step values every layer would otherwise rebuild, keyed by the step's own tensors
        # (held, so an identity is never reused within a step).
        self._slots: Optional[tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]] = None
        self._rope: Optional[tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor,
                                   Optional[torch.Tensor]]] = None
        self._gather: Optional[tuple[AttentionMetadata, Optional[int], DecodeGather]] = None
        # Per-layer tensors, keyed by identity (held): each layer's rotary table mapped to the
        # first equal one (every layer builds its own copy, so the step's tables would be
        # rebuilt 30 times), and each cache's [slots, Hk, D] view with whether the C kernels
        # take it (float32, contiguous: checked once, not per layer and step).
        self._rope_alias: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._flat: dict[int, tuple[torch.Tensor, torch.Tensor, bool]] = {}
        self._handoff = Bf16Handoff()
        self._runs: RunViews = {}

    def rms_norm(self, x, weight, eps):
        return F.rms_norm(x, weight.shape, weight, eps)

    def fused_add_rms_norm(self, x, residual, weight, eps):
        s = x + residual
        return self.rms_norm(s, weight, eps), s

    def _rotate(self, positions: torch.Tensor, cache: torch.Tensor, x: torch.Tensor
                ) -> torch.Tensor:
        """x [T, H, D] rotated (NeoX), in the table's dtype. Up to ROPE_MATMUL_ROWS rows, one
        matmul by the row's rope_matrix, built once per step for every layer (2.1 against 6.2
        us per layer); above, the three elementwise ops."""
        alias = self._rope_alias.get(id(cache))
        if alias is None or alias[0] is not cache:
            same = next((c for c, _ in self._rope_alias.values() if c.shape == cache.shape
                         and c.dtype == cache.dtype and torch.equal(c, cache)), cache)
            self._rope_alias[id(cache)] = alias = (cache, same)
        table = alias[1]
        rope = self._rope
        if (rope is None or rope[0] is not positions or rope[1] is not table
                or rope[2] != x.shape[-1]):
            cos, sin = rope_tables(positions, table)
            m = (rope_matrix(cos, sin, x.shape[-1]) if positions.shape[0] <= ROPE_MATMUL_ROWS
                 else None)
            self._rope = rope = (positions, table, x.shape[-1], cos, sin, m)
        if rope[5] is None:
            return _neox_rotate(x, rope[3], rope[4])
        return torch.bmm(x if x.dtype == table.dtype else x.to(table.dtype), rope[5])

    def _cache_entry(self, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
        hit = self._flat.get(id(cache))
        if hit is None or hit[0] is not cache:
            self._flat[id(cache)] = hit = (cache, cache.view(-1, *cache.shape[2:]),
                                           cache.dtype == torch.float32 and cache.is_contiguous())
        return hit

    def _slots_view(self, cache: torch.Tensor) -> torch.Tensor:
        return self._cache_entry(cache)[1]

    def _native_caches(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
        """Whether the C kernels take these caches (float32, contiguous)."""
        return self._cache_entry(k_cache)[2] and self._cache_entry(v_cache)[2]

    def store_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale):
        if self._slots is None or self._slots[0] is not slot_mapping:
            keep = slot_mapping >= 0
            rows = None if bool(keep.all()) else keep
            self._slots = (slot_mapping, slot_mapping.long() if rows is None else
                           slot_mapping[rows].long(), rows)
        _, slots, rows = self._slots
        if rows is not None:
            k, v = k[rows], v[rows]
        self._slots_view(k_cache).index_copy_(0, slots, _write(k, k_cache.dtype, k_scale))
        self._slots_view(v_cache).index_copy_(0, slots, _write(v, v_cache.dtype, v_scale))

    def rope_store_kv(self, positions, q, k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale,
                      cos_sin_cache, is_neox, q_norm_weight=None, k_norm_weight=None,
                      norm_eps=0.0):
        qk = _adjacent_heads(q, k) if is_neox and q_norm_weight is None else None
        if qk is None:
            return rope_store_kv_unfused(self, positions, q, k, v, k_cache, v_cache,
                                         slot_mapping, k_scale, v_scale, cos_sin_cache, is_neox,
                                         q_norm_weight, k_norm_weight, norm_eps)
        if (self._native is not None and self._native_caches(k_cache, v_cache)
                and _native_rope_takes(qk, v, positions, slot_mapping, cos_sin_cache)):
            hq, hk, d = q.shape[1], k.shape[1], q.shape[2]
            return self._native.rope_store(qk, q.stride(0), q.shape[0], hq, hk, d, positions,
                                           cos_sin_cache, slot_mapping, self._slots_view(k_cache),
                                           self._slots_view(v_cache))
        rotated = self._rotate(positions, cos_sin_cache, qk)
        hq = q.shape[1]
        # narrow, not slicing: a Python slice index costs several times a C method call here.
        self.store_kv(rotated.narrow(1, hq, k.shape[1]), v, k_cache, v_cache, slot_mapping,
                      k_scale, v_scale)
        return rotated.narrow(1, 0, hq)

    def prepare_weight(self, qw: Quantized) -> Optional[Any]:
        if isinstance(qw, Fp8Weight):
            return EmulatedFp8Linear.of(qw)  # the reference's: the CPU has no fp8 matmul
        if qw.codes.is_floating_point():
            return None
        lin = cpu_woq.prepare(qw)
        self._unchosen.append(lin)
        return lin

    def weights_prepared(self) -> None:
        self._int4_rows.update(cpu_woq.choose(self._unchosen))
        self._unchosen = []

    def linear(self, x, weight, bias=None):
        if isinstance(weight, torch.Tensor):
            return F.linear(x, weight, bias)
        return weight(x, bias)

    def add_rms_norm_linear(self, x, residual, norm_weight, eps, weight, bias=None):
        """x may be bf16 (a block's last projection, gated_linear): the residual add promotes
        it to the residual's dtype in the same op."""
        if (self._native is not None and isinstance(weight, cpu_woq.CpuQuantizedLinear)
                and _native_norm_takes(x, residual, norm_weight, bias)):
            xw = self._handoff.bf16_buffer(*x.shape)
            h, r = self._native.norm_bf16(x, residual, norm_weight, eps, xw)
            return self._native.scale_rows(weight.bf16(xw), r, bias), h
        h = x if residual is None else x + residual
        if not isinstance(weight, cpu_woq.CpuQuantizedLinear) or h.dim() != 2:
            return add_rms_norm_linear_unfused(self, h, None, norm_weight, eps, weight, bias)
        return self._handoff.norm_linear(h, norm_weight, eps, weight, bias), h

    def block_output_linear(self, x, weight, bias=None):
        """In bf16 when the weight is quantized, as gated_linear's (cpu_handoff.py)."""
        if not isinstance(weight, cpu_woq.CpuQuantizedLinear) or x.dim() != 2:
            return self.linear(x, weight, bias)
        y = weight.bf16(x.to(torch.bfloat16))
        return y if bias is None else y + bias

    def silu_and_mul_linear(self, x, weight, bias=None):
        """In bf16 when the weight is quantized (cpu_handoff.py says why that is safe)."""
        if not isinstance(weight, cpu_woq.CpuQuantizedLinear) or x.dim() != 2:
            return self.linear(torch_ref.silu_and_mul(x), weight, bias)
        if self._native is not None and x.dtype == torch.float32 and x.stride(1) == 1:
            y = weight.bf16(self._native.silu_mul_bf16(
                x, self._handoff.bf16_buffer(x.shape[0], x.shape[1] // 2)))
            return y if bias is None else y + bias
        return self._handoff.gated_linear(x, weight, bias)

    def attention(self, q, k_cache, v_cache, meta: AttentionMetadata, scale, k_scale, v_scale,
                  sliding_window=None):
        n = meta.num_seqs if meta.is_decode else meta.num_decode_seqs
        if n == 0:
            return torch_ref.attention(q, k_cache, v_cache, meta, scale, k_scale, v_scale,
                                       sliding_window)
        qd = q if n == q.shape[0] else q.narrow(0, 0, n)
        if (self._native is not None and self._native_caches(k_cache, v_cache)
                and _native_attention_takes(qd, meta)):
            head = self._native.decode_attention(qd, k_cache, v_cache, meta.block_tables[:n],
                                                 meta.context_lens[:n], scale,
                                                 int(sliding_window or 0))
            return head if n == meta.num_seqs else torch.cat([head, torch_ref.attention(
                q[n:], k_cache, v_cache, _tail(meta, n), scale, k_scale, v_scale,
                sliding_window)])
        g = self._decode_gather(meta, n, k_cache, sliding_window)
        head = decode_attention(
            qd, g.read(k_cache, self._slots_view(k_cache), k_scale, q.dtype, True),
            g.read(v_cache, self._slots_view(v_cache), v_scale, q.dtype, False), g, scale)
        if n == meta.num_seqs:
            return head
        rest = torch_ref.attention(q[n:], k_cache, v_cache, _tail(meta, n), scale, k_scale,
                                   v_scale, sliding_window)
        return torch.cat([head, rest])

    def _decode_gather(self, meta: AttentionMetadata, n: int, k_cache: torch.Tensor,
                       sliding_window: Optional[int]) -> DecodeGather:
        if (self._gather is None or self._gather[0] is not meta
                or self._gather[1] != sliding_window):
            ctx = meta.context_lens_cpu
            max_ctx = max(ctx[:n]) if ctx else meta.max_context_len
            self._gather = (meta, sliding_window,
                            DecodeGather(meta.block_tables[:n], meta.context_lens[:n], max_ctx,
                                         k_cache.shape[1], sliding_window, self._runs))
        return self._gather[2]


def _tail(meta: AttentionMetadata, n: int) -> AttentionMetadata:
    """The sequences after the first n (their queries start at offset 0 of q[n:])."""
    q_lens = meta.q_lens_cpu[n:] if meta.q_lens_cpu else None
    ctx = meta.context_lens_cpu[n:] if meta.context_lens_cpu else None
    return AttentionMetadata(meta.cu_seqlens_q[n:] - n, meta.context_lens[n:],
                             meta.block_tables[n:], meta.slot_mapping[n:], meta.max_q_len,
                             meta.max_context_len, False, q_lens, ctx)


def _rows(x: torch.Tensor, dtype: torch.dtype) -> bool:
    """x is [T, N] of dtype with contiguous rows (any row stride)."""
    return x.dim() == 2 and x.dtype == dtype and x.stride(1) == 1


def _f32_or_none(t: Optional[torch.Tensor]) -> bool:
    return t is None or (t.dtype == torch.float32 and t.is_contiguous())


def _native_norm_takes(x: torch.Tensor, residual: Optional[torch.Tensor],
                       norm_weight: torch.Tensor, bias: Optional[torch.Tensor]) -> bool:
    return ((_rows(x, torch.float32) or _rows(x, torch.bfloat16)) and _f32_or_none(residual)
            and _f32_or_none(bias) and _f32_or_none(norm_weight))


def _native_rope_takes(qk: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                       slots: torch.Tensor, cos_sin: torch.Tensor) -> bool:
    """q, k and v as one qkv row's heads (v right after k), int64 positions and slots, a
    float32 table no wider than a head."""
    t, heads, d = qk.shape
    hk = v.shape[1]
    return (qk.dtype == torch.float32 and v.shape == (t, hk, d) and v.stride()[1:] == (d, 1)
            and (t == 1 or v.stride(0) == qk.stride(0))
            and v.data_ptr() == qk.data_ptr() + heads * d * 4
            and positions.dtype == slots.dtype == torch.int64
            and positions.is_contiguous() and slots.is_contiguous()
            and cos_sin.dtype == torch.float32 and cos_sin.is_contiguous()
            and cos_sin.shape[1] % 2 == 0 and cos_sin.shape[1] <= d)


def _native_attention_takes(q: torch.Tensor, meta: AttentionMetadata) -> bool:
    return (q.dtype == torch.float32 and q.stride()[1:] == (q.shape[2], 1)
            and meta.block_tables.dtype == meta.context_lens.dtype == torch.int32
            and meta.block_tables.stride(1) == 1 and meta.context_lens.is_contiguous())
