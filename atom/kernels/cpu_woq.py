"""Weight-only quantized matmuls on the CPU, chosen per weight shape and row count by timing.

Two kernels take a QuantizedWeight:
- `Int4Planes`: torch's `_weight_int4pack_mm_for_cpu` (4-bit codes, one bf16 scale and zero per
  32-wide group). Codes wider than 4 bits (Q5_*, Q8_0) are split into two 4-bit planes laid
  side by side along K, with the input repeated to match, so one call computes
  x·(16·hi + lo)·s — exact in the codes; only the scale's rounding to bf16 is lost.
- `DenseBf16`: the weight dequantized once, rounded to bf16 and reordered once into oneDNN's
  blocked layout (AMX where the CPU has it). It reads 4x the bytes of int4 but does its
  arithmetic in tiles, so it wins once a few rows share each weight read.
Both compute in bf16 (torch's CPU int4/int8 kernels are vectorised for bf16 inputs only; their
float32 paths are scalar, ~20x slower), so outputs differ from the float32 oracle by bf16
rounding. Timings decide up to which row count int4 serves (`int4_max_rows`); dense bf16 is
always kept, for prefill chunks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from atom.kernels.quantized_weight import QuantizedWeight

# Row counts timed per shape (decode batches; prefill is dense). At 32 rows int4 ran 2-4x
# slower than dense bf16 for every SmolLM2 shape, so past the last count a shape is dense.
TIMED_ROWS = (1, 2, 4, 8, 16)
SWEEPS = 3  # timed sweeps per kernel and row count


@dataclass
class Int4Planes:
    packed: torch.Tensor  # [N, planes * K / 2] uint8, torch's CPU int4 layout
    scales_zeros: torch.Tensor  # [planes * K / group, N, 2] bf16
    planes: int
    group_size: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [M, K] bf16 → [M, N] bf16."""
        if self.planes > 1:
            x = x.repeat(1, self.planes)
        return torch._weight_int4pack_mm_for_cpu(x, self.packed, self.group_size,
                                                 self.scales_zeros)


def _plane_count(qw: QuantizedWeight) -> Optional[int]:
    lo, hi = qw.code_min, qw.code_max
    if (lo >= -8 and hi <= 7) or (lo >= 0 and hi <= 15):
        return 1
    if lo >= -128 and hi <= 127:
        return 2
    return None


def int4_planes(qw: QuantizedWeight) -> Optional[Int4Planes]:
    """The int4 kernel's operands for qw, or None when the kernel cannot take it (groups other
    than 32/64/128/256, N not a multiple of 16, codes wider than 8 bits, non-integer codes).

    The kernel computes (c4 - 8) * s + z per 4-bit code c4. One plane: signed codes shift by 8
    (z = zero), unsigned ones keep z = 8s + zero. Two planes: c = 16·hi + lo with hi = c >> 4
    (signed, in [-8, 7]: c4 = hi + 8, scale 16s, z = 0) and lo = c & 15 (c4 = lo, z = 8s +
    zero): the zero never absorbs a multiple of the code offset, whose bf16 rounding would bias
    every weight of the group."""
    n, k = qw.shape
    planes = _plane_count(qw)
    if (qw.codes.is_floating_point() or planes is None or qw.group_size not in (32, 64, 128, 256)
            or n % 16 or k % qw.group_size):
        return None
    c = qw.codes.to(torch.int32)
    s = qw.scales
    zero = qw.zeros if qw.zeros is not None else torch.zeros_like(s)
    if planes == 1:
        signed = qw.code_min < 0
        codes = [c + 8 if signed else c]
        sz = [(s, zero if signed else 8 * s + zero)]
    else:
        codes = [c & 15, (c >> 4) + 8]
        sz = [(s, 8 * s + zero), (16 * s, torch.zeros_like(s))]
    packed = torch._convert_weight_to_int4pack_for_cpu(torch.cat(codes, dim=1).contiguous(), 1)
    scales_zeros = torch.cat([torch.stack([a, b], dim=-1) for a, b in sz], dim=1)  # [N, G, 2]
    return Int4Planes(packed, scales_zeros.transpose(0, 1).contiguous().to(torch.bfloat16),
                      planes, qw.group_size)


class DenseBf16:
    """A bf16 weight for oneDNN's linear, reordered at load into its blocked layout: F.linear
    on the plain [N, K] matrix reorders it on every call, which cost 1.3-1.8x the matmul for
    every SmolLM2 shape at 1-256 rows (the 49152-row head: 4.6 against 2.5 ms at 8 rows)."""

    # The reorder's row-count hint: at 16 the outputs equal F.linear's, bit for bit, at 1-256
    # rows (with 1, a 256-row prefill summed in another order).
    PACK_ROWS = 16

    def __init__(self, weight: torch.Tensor) -> None:
        self.shape = weight.shape
        # oneDNN takes bf16 only where the CPU has AVX-512 (BF16 or emulated): elsewhere F.linear.
        self.packed = (torch.backends.mkldnn.is_available()
                       and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        self.weight = (torch.ops.mkldnn._reorder_linear_weight(weight, self.PACK_ROWS)
                       if self.packed else weight)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [M, K] bf16 → [M, N] bf16."""
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, None, "none", [], "")
        return F.linear(x, self.weight)


class CpuQuantizedLinear:
    """A linear layer's prepared weight: dense bf16, and the int4 kernel (None where it never
    won) with the row count up to which it serves."""

    def __init__(self, int4: Optional[Int4Planes], dense: DenseBf16, int4_max_rows: int) -> None:
        self.int4, self.dense, self.int4_max_rows = int4, dense, int4_max_rows

    def __call__(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x @ W.T + bias in x's dtype (rounded to bf16 on the way in and out)."""
        two_d = x.dim() == 2
        y = self.bf16((x if two_d else x.reshape(-1, x.shape[-1])).to(torch.bfloat16))
        y = y.to(x.dtype)
        if not two_d:
            y = y.view(*x.shape[:-1], y.shape[-1])
        return y if bias is None else y + bias

    def bf16(self, xb: torch.Tensor) -> torch.Tensor:
        """xb: [M, K] bf16 → [M, N] bf16, no casts: for a caller that hands activations from
        one kernel to the next in bf16 (each cast is an op of ~2-5 us at these sizes)."""
        int4 = self.int4
        if int4 is not None and xb.shape[0] <= self.int4_max_rows:
            return int4(xb)
        return self.dense(xb)


Key = tuple  # (weight shape, planes, group size): weights that share a kernel choice


def _key(lin: CpuQuantizedLinear) -> Key:
    assert lin.int4 is not None
    return (tuple(lin.dense.shape), lin.int4.planes, lin.int4.group_size)


def _sweep(linears: list[CpuQuantizedLinear], keys: list[Key], xs: dict[int, torch.Tensor],
           timed: set, int4: bool) -> dict[Key, float]:
    """Every weight in the model's order, as a forward reads them; the CPU seconds spent in
    each timed shape's weights, run by the int4 kernel or dense bf16. The other shapes run
    dense, as they will. CPU time, not wall: a neighbour that takes the core for a while moves
    wall time by more than the two kernels differ."""
    spent = dict.fromkeys(timed, 0.0)
    for lin, key in zip(linears, keys):
        x = xs[lin.dense.shape[1]]
        if key not in timed:
            lin.dense(x)
            continue
        t0 = time.process_time()
        lin.int4(x) if int4 else lin.dense(x)  # type: ignore[misc]
        spent[key] += time.process_time() - t0
    return spent


def int4_max_rows(linears: list[CpuQuantizedLinear], rows: tuple[int, ...] = TIMED_ROWS
                  ) -> dict[Key, int]:
    """Per shape, the largest timed row count at which the int4 kernel beats dense bf16 (0:
    never). Timed inside sweeps over every weight in the model's order, as a forward reads
    them: timed shape by shape, a shape's weights stay in the cache between repeats, where
    dense bf16's 4x bytes cost nothing (that chose dense for the MLP's down projection at 8
    rows, which in the engine ran 6% slower for it). Past its first loss a shape stays dense:
    int4's cost grows with the rows (it is compute-bound above ~4), dense bf16's barely does."""
    keys = [_key(lin) for lin in linears]
    widths = {lin.dense.shape[1] for lin in linears}
    best = dict.fromkeys(keys, 0)
    alive = set(keys)
    for m in rows:
        xs = {k: torch.randn(m, k).to(torch.bfloat16) for k in widths}
        _sweep(linears, keys, xs, alive, True)  # warm-up
        # Each kernel's best of SWEEPS, the two alternating: a neighbour's burst of memory
        # traffic then lands on both.
        runs = [_sweep(linears, keys, xs, alive, r % 2 == 0) for r in range(2 * SWEEPS)]
        int4 = {k: min(run[k] for run in runs[0::2]) for k in alive}
        dense = {k: min(run[k] for run in runs[1::2]) for k in alive}
        for key in list(alive):
            if int4[key] < dense[key]:
                best[key] = m
            else:
                alive.discard(key)
        if not alive:
            break
    return best


def prepare(qw: QuantizedWeight) -> CpuQuantizedLinear:
    """Both kernels for qw; `choose` then sets, per shape, up to which row count int4 serves."""
    return CpuQuantizedLinear(int4_planes(qw), DenseBf16(qw.dequantize().to(torch.bfloat16)), 0)


def choose(linears: list[CpuQuantizedLinear]) -> dict[Key, int]:
    """Time every shape's crossover over the whole model at once (int4_max_rows); drop the
    int4 kernel where it never wins. Returns the crossover per (shape, planes, group)."""
    packed = [lin for lin in linears if lin.int4 is not None]
    out = int4_max_rows(packed) if packed else {}
    for lin in packed:
        lin.int4_max_rows = out[_key(lin)]
        if lin.int4_max_rows == 0:
            lin.int4 = None
    return out
