"""What the GPU benchmark scripts share: a decode-attention case over a random paged cache, its
paged gather alone (loads, no attention), timing of work issued on other streams, sustained runs
with the GPU's clock and power sampled, and a result's header, report line and JSON file.

Imported by `gpu_bench.py` and the `*_probe.py` scripts beside it, each run as
`python3 benchmarks/<script>.py` (so this directory is on sys.path).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import triton
import triton.language as tl

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton.paged_kv import paged_kv_offsets


@dataclass
class DecodeCase:
    q: torch.Tensor  # [batch, hq, d] bf16
    kc: torch.Tensor  # [blocks, page, hk, d]
    vc: torch.Tensor
    meta: AttentionMetadata  # every context `ctx` long, block tables a random permutation

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V one decode step over the whole cache reads."""
        return 2 * self.kc.numel() * self.kc.element_size()


def decode_case(batch: int, ctx: int, hq: int = 32, hk: int = 8, d: int = 128, page: int = 16,
                kv_dtype: torch.dtype = torch.bfloat16, heads_outer: bool = False) -> DecodeCase:
    """One query per sequence over `ctx` cached tokens each (Llama-3.1-8B's heads by default);
    the blocks are shuffled so reads are paged as in serving, and the cache is sized to the
    contexts (one layer of the 8B run's ~415 x 1.5k is 2.6 GB: far past L2). The caches are
    [blocks, page, hk, d] views; `heads_outer` stores each block head by head ([blocks, hk, page,
    d] in memory), so one kv head's page is one contiguous run."""
    nblk = batch * (ctx // page)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    kc, vc = (torch.randn(nblk, page, hk, d, **bf).to(kv_dtype) for _ in range(2))
    if heads_outer:
        kc, vc = (c.transpose(1, 2).contiguous().transpose(1, 2) for c in (kc, vc))
    i32 = dict(device="cuda", dtype=torch.int32)
    meta = AttentionMetadata(torch.arange(batch + 1, **i32), torch.full((batch,), ctx, **i32),
                             torch.randperm(nblk, **i32).view(batch, -1),
                             torch.zeros(batch, device="cuda", dtype=torch.int64), 1, ctx, True)
    return DecodeCase(torch.randn(batch, hq, d, **bf), kc, vc, meta)


@triton.jit
def gqa_query_group(q_ptr, seq, kvh, q_tok_stride, q_head_stride, GROUP: tl.constexpr,
                    G_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The GROUP query heads of kv head `kvh` of sequence `seq` (rows past GROUP zero, up to
    G_PAD: the dots' smallest M), as the decode probes' kernels start: (q [G_PAD, HEAD_DIM] in
    q's dtype, the heads, their mask, the head-dim range)."""
    g = tl.arange(0, G_PAD)
    g_mask = g < GROUP
    heads = kvh * GROUP + g
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * q_tok_stride + heads[:, None] * q_head_stride + d[None, :],
                mask=g_mask[:, None], other=0.0)
    return q, heads, g_mask, d


@triton.jit
def _gather_sum_kernel(kc_ptr, vc_ptr, o_ptr, ctx_ptr, bt_ptr, bt_stride, c_blk_stride,
                       c_tok_stride, c_head_stride, PAGE: tl.constexpr, HEAD_DIM: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    """The paged gather of atom's decode kernel and nothing else: K + V summed. Triton issues
    these as plain 16-byte loads (no cp.async: nothing feeds a dot), so its TB/s on N SMs is
    what vectorised gathers alone allow, without the softmax and the dots."""
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    ctx = tl.load(ctx_ptr + seq)
    d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    bt_row = bt_ptr + seq * bt_stride
    for start in range(0, ctx, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < ctx
        off = paged_kv_offsets(bt_row, n, n_mask, kvh, c_blk_stride, c_tok_stride, c_head_stride,
                               PAGE)
        k = tl.load(kc_ptr + off[:, None] + d[None, :], mask=n_mask[:, None], other=0.0)
        v = tl.load(vc_ptr + off[:, None] + d[None, :], mask=n_mask[:, None], other=0.0)
        acc += k.to(tl.float32) + v.to(tl.float32)
    tl.store(o_ptr + (seq * tl.num_programs(1) + kvh) * HEAD_DIM + d, tl.sum(acc, 0))


@triton.jit
def online_softmax_step(qk, v, m_i, l_i, acc, DOT: tl.constexpr):
    """One KV tile of decode attention's running softmax: (m, l, acc) after the tile's scores qk
    [G, N] (log2 units; masked ones -inf) and its values v [N, D], the dot in DOT. The probes'
    kernels share it; atom's kernel keeps its own (it also guards rows with no score yet)."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.exp2(qk - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT))
    return m_new, l_i, acc


def gather_sum(kc: torch.Tensor, vc: torch.Tensor, ctx: torch.Tensor, tables: torch.Tensor,
               block_n: int = 64, num_warps: int = 4, num_stages: int = 2) -> torch.Tensor:
    b, hk, d = tables.shape[0], kc.shape[2], kc.shape[3]
    out = torch.empty(b, hk, d, device=kc.device, dtype=torch.float32)
    _gather_sum_kernel[(b, hk)](kc, vc, out, ctx, tables, tables.stride(0), kc.stride(0),
                                kc.stride(1), kc.stride(2), PAGE=kc.shape[1], HEAD_DIM=d,
                                BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)
    return out


def on_streams(*work: tuple[torch.cuda.Stream, Callable[[], Any]]) -> Callable[[], None]:
    """Each fn on its stream, all forked from the current stream before any is issued and
    joined back into it after all are (joining one before issuing the next would serialise)."""
    def run() -> None:
        main = torch.cuda.current_stream()
        for stream, _ in work:
            stream.wait_stream(main)
        for stream, fn in work:
            with torch.cuda.stream(stream):
                fn()
        for stream, _ in work:
            main.wait_stream(stream)
    return run


def _ms_per_call(fn: Callable[[], Any], calls: int) -> float:
    """GPU ms per call of `calls` back-to-back calls, between events on the current stream."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / calls


def median_ms(fn: Callable[[], Any], reps: int = 10, inner: int = 1) -> float:
    """Median wall ms of one fn call between events on the current stream, synchronised each
    time, after one warm-up call; `inner` calls per timing spread the sync and the streams' joins
    (fn may issue on other streams: on_streams joins them back) over that many calls."""
    fn()
    torch.cuda.synchronize()
    times = sorted(_ms_per_call(fn, inner) for _ in range(reps))
    return round(times[len(times) // 2], 3)


def nvidia_smi(query: str) -> list[str]:
    """The GPU 0 fields `query` names (nvidia-smi --query-gpu), as strings without units."""
    out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                          "-i", "0"], capture_output=True, text=True, timeout=10).stdout
    return [f.strip() for f in out.strip().split(",")]


def probe_meta(**fields: Any) -> dict[str, Any]:
    """What every probe's result starts with: the commit (ATOM_COMMIT, passed from the
    developer's machine), the GPU and torch, then the probe's own fields."""
    return {"commit": os.environ.get("ATOM_COMMIT", "unknown"),
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, **fields}


class GpuSampler:
    """nvidia-smi's SM clock, power and clock-event reasons, sampled on a thread while the GPU
    works (`with GpuSampler() as s: ...; s.summary()`). Why: on the H200 a sustained GEMM is held
    at the 700 W power limit with its clock far below the maximum (run 35), so a rate measured
    in a short burst can overstate what a long run gets; this says whether a run was capped.
    Reason bit 0x4 is the software power cap (NVML's clock-event reasons)."""

    QUERY = "clocks.sm,power.draw,clocks_event_reasons.active"

    def __init__(self, period_s: float = 0.05, enabled: bool = True) -> None:
        self.period_s, self.enabled = period_s, enabled
        self.samples: list[tuple[float, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @classmethod
    def once(cls) -> list[str]:
        return nvidia_smi(cls.QUERY)

    def _run(self) -> None:
        """Samples until stopped; none at all where nvidia-smi is missing or refuses the query
        (a CPU machine, an older driver), so the summary is then empty rather than the run lost."""
        while not self._stop.is_set():
            try:
                got = self.once()
                float(got[0]), float(got[1])
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                return
            self.samples.append((time.time(), got))
            time.sleep(self.period_s)

    def __enter__(self) -> "GpuSampler":
        self.start = time.time()
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end = time.time()
        self._stop.set()
        if self.enabled:
            self._thread.join()

    def summary(self, skip: float = 0.25) -> dict[str, Any]:
        """Medians of the samples after the first `skip` of the window (the clock settling),
        and the share of them that showed each reason."""
        kept = [s for t, s in self.samples if t > self.start + (self.end - self.start) * skip]
        if not kept:
            return {}
        reasons = Counter(s[2] for s in kept)
        return {"samples": len(kept), "sm_mhz": statistics.median(float(s[0]) for s in kept),
                "watts": round(statistics.median(float(s[1]) for s in kept), 1),
                "reasons": {r: round(c / len(kept), 3) for r, c in reasons.most_common()}}

    def timeline(self, parts: int = 10) -> list[tuple[float, float]]:
        """(median SM MHz, median W) of each of `parts` equal slices of the window: a long run's
        phases (prefill waves, decode) side by side."""
        span = (self.end - self.start) / parts
        out = []
        for i in range(parts):
            got = [s for t, s in self.samples if self.start + i * span <= t < self.start + (i + 1) * span]
            if got:
                out.append((statistics.median(float(s[0]) for s in got),
                            round(statistics.median(float(s[1]) for s in got), 1)))
        return out


def sustained(fn: Callable[[], Any], seconds: float = 2.5) -> dict[str, Any]:
    """fn's median ms (short bursts), then fn back to back for `seconds` with the GPU sampled
    meanwhile: ms per call under sustained load (at the power limit it is longer), and the SM
    clock, power and clock-event reasons after the first quarter (the clock settling)."""
    ms = median_ms(fn)
    calls = max(1, int(seconds * 1000 / ms))
    torch.cuda.synchronize()
    with GpuSampler() as gpu:
        per_call = _ms_per_call(fn, calls)
    return {"ms": ms, "sustained_ms": round(per_call, 3), **gpu.summary()}


def error_text(e: Exception, limit: int = 200) -> str:
    """A failure recorded as a result (a config that does not compile is a result too)."""
    return f"{type(e).__name__}: {str(e)[:limit]}"


def report(name: str, results: dict[str, Any], out: Optional[str]) -> None:
    """The `== name: {...}` line device_batch.sh greps, and the results as the JSON file `out`
    (the scripts' --out) when one is asked for."""
    print(f"== {name}: {json.dumps(results)}", flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
