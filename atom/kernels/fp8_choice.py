"""Which multi-row fp8 GEMM serves a weight shape at a row count: cuBLASLt's (`_scaled_mm`) or
the Triton one (triton/fp8_scaled_gemm.py), timed once per shape when the weights are ready.

Neither wins everywhere: cuBLASLt picks its kernels per problem from heuristics, the Triton
GEMM from a tile table, and which is faster changes with the row count (decode batches to
prefill chunks). So each distinct per-channel fp8 weight shape is timed at a few row counts,
and a row count takes the winner of the smallest bucket that holds it. A failure to time (a
compile error) keeps cuBLASLt for that shape: choosing only changes speed.
"""
from __future__ import annotations

import bisect
import logging
from typing import Callable

import torch

log = logging.getLogger("atom.kernels")

# Row buckets (upper bounds): decode batches (16 < rows: below, the weight-only GEMV serves),
# then prefill chunks. Rows above the last bucket take its winner.
BUCKETS = (64, 256, 1024, 4096, 16384)
REPS = 10


def bucket_of(rows: int) -> int:
    return BUCKETS[min(bisect.bisect_left(BUCKETS, rows), len(BUCKETS) - 1)]


def _time_ms(fn: Callable[[], object]) -> float:
    fn()  # compile / heuristics, off the clock
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(REPS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / REPS


def _codes(rows: int, cols: int, device: torch.device) -> torch.Tensor:
    return torch.randn(rows, cols, device=device).clamp(-448, 448).to(torch.float8_e4m3fn)


def triton_buckets(shape: tuple[int, int], gemm: Callable, device: torch.device
                   ) -> frozenset[int]:
    """The buckets where gemm(xq, x_scale, w, w_scale, bias, triton=True) beats triton=False
    for an [N, K] weight, timed on random codes (a GEMM's time does not depend on its values)."""
    n, k = shape
    w, w_scale = _codes(n, k, device), torch.full((n,), 1e-3, device=device)
    wins = set()
    for rows in BUCKETS:
        xq, x_scale = _codes(rows, k, device), torch.full((rows, 1), 1e-2, device=device)
        times = [_time_ms(lambda t=t: gemm(xq, x_scale, w, w_scale, None, triton=t))
                 for t in (True, False)]
        if times[0] < times[1]:
            wins.add(rows)
    return frozenset(wins)


def choose(shapes: set[tuple[int, int]], gemm: Callable, device: torch.device
           ) -> dict[tuple[int, int], frozenset[int]]:
    """Per [N, K] shape, the row buckets the Triton GEMM takes."""
    out = {}
    for shape in sorted(shapes):
        try:
            out[shape] = triton_buckets(shape, gemm, device)
        except Exception as e:  # a kernel that fails to compile or run here: cuBLASLt
            log.warning("fp8 GEMM choice for %s: the Triton GEMM failed (%s); cuBLASLt", shape, e)
            out[shape] = frozenset()
    log.info("fp8 GEMMs: Triton at %s rows", {s: sorted(b) for s, b in out.items()})
    return out
