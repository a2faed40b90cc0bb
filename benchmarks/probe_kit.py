"""What the GPU benchmark scripts share: a decode-attention case over a random paged cache,
timing of work issued on other streams, and writing a result.

Imported by `gpu_bench.py`, `sm_partition_probe.py` and `tma_attention_probe.py`, each run as
`python3 benchmarks/<script>.py` (so this directory is on sys.path).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from atom.kernels.metadata import AttentionMetadata


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
                kv_dtype: torch.dtype = torch.bfloat16) -> DecodeCase:
    """One query per sequence over `ctx` cached tokens each (Llama-3.1-8B's heads by default);
    the blocks are shuffled so reads are paged as in serving, and the cache is sized to the
    contexts (one layer of the 8B run's ~415 x 1.5k is 2.6 GB: far past L2)."""
    nblk = batch * (ctx // page)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(nblk, page, hk, d, **bf).to(kv_dtype)
    vc = torch.randn(nblk, page, hk, d, **bf).to(kv_dtype)
    i32 = dict(device="cuda", dtype=torch.int32)
    meta = AttentionMetadata(torch.arange(batch + 1, **i32), torch.full((batch,), ctx, **i32),
                             torch.randperm(nblk, **i32).view(batch, -1),
                             torch.zeros(batch, device="cuda", dtype=torch.int64), 1, ctx, True,
                             split_counters=torch.zeros(batch * hk, **i32))
    return DecodeCase(torch.randn(batch, hq, d, **bf), kc, vc, meta)


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


def median_ms(fn: Callable[[], Any], reps: int = 10) -> float:
    """Median wall ms of fn between events on the current stream, synchronised each time, after
    one warm-up call (fn may issue on other streams: on_streams joins them back)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return round(sorted(times)[len(times) // 2], 3)


def write_json(results: dict[str, Any], out: Optional[str]) -> None:
    """The results as the JSON file `out` (the scripts' --out), when one is asked for."""
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
