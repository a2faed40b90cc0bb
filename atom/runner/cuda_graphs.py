"""Decode CUDA graphs: one captured forward (model + logits) per batch size, replayed padded.

Decode steps of small models are launch-bound (hundreds of tiny kernels), so the forward for
each size in `runtime.cudagraph_capture_sizes` is captured once at start-up, all graphs sharing
one memory pool (largest first, so smaller ones reuse its blocks). A step with B sequences
replays the smallest captured size >= B: its inputs are copied into static buffers and the pad
rows get slot -1 (no KV write) and context length 0 (attention skips them). The attention
kernels read every length from these buffers on the device, so one graph serves any contexts.
"""
from __future__ import annotations

import bisect
import gzip
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext, ForwardSlot

log = logging.getLogger("atom.runner")

ForwardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids, positions) → logits


class DecodeGraphs:
    def __init__(self, forward: ForwardFn, sizes: list[int], max_blocks_per_seq: int,
                 kv_caches: list, kv_scales: list, split_counters: torch.Tensor,
                 device: torch.device, slot: ForwardSlot, trace_dir: Optional[str] = None,
                 rank: int = 0) -> None:
        self.forward, self.slot = forward, slot
        self.sizes = sorted(set(int(s) for s in sizes))
        self.max_bs = self.sizes[-1]
        self.kv_caches, self.kv_scales = kv_caches, kv_scales
        self.split_counters = split_counters
        self.trace_dir, self.rank = trace_dir, rank
        n, dev = self.max_bs, device
        self.ids = torch.zeros(n, dtype=torch.long, device=dev)
        self.pos = torch.zeros(n, dtype=torch.long, device=dev)
        self.slots = torch.full((n,), -1, dtype=torch.int64, device=dev)
        self.ctx = torch.zeros(n, dtype=torch.int32, device=dev)
        self.tables = torch.zeros((n, max_blocks_per_seq), dtype=torch.int32, device=dev)
        self.cu = torch.arange(n + 1, dtype=torch.int32, device=dev)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def _meta(self, bs: int) -> AttentionMetadata:
        return AttentionMetadata(
            cu_seqlens_q=self.cu[:bs + 1], context_lens=self.ctx[:bs], block_tables=self.tables[:bs],
            slot_mapping=self.slots[:bs], max_q_len=1, max_context_len=self.tables.shape[1],
            is_decode=True, split_counters=self.split_counters)

    @torch.inference_mode()
    def capture(self) -> float:
        """Capture every size; returns the seconds it took (logged by the caller)."""
        t0 = time.perf_counter()
        pool = None
        for bs in reversed(self.sizes):
            with self._trace(bs), self.slot.using(
                    ForwardContext(self._meta(bs), self.kv_caches, self.kv_scales)):
                self.forward(self.ids[:bs], self.pos[:bs])  # warm-up: compiles, sizes the pool
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = self.forward(self.ids[:bs], self.pos[:bs])
                torch.cuda.synchronize()
            pool = graph.pool()
            self.graphs[bs] = (graph, out)
        return time.perf_counter() - t0

    def fits(self, batch: int) -> bool:
        return 0 < batch <= self.max_bs

    def replay(self, input_ids: torch.Tensor, positions: torch.Tensor,
               meta: AttentionMetadata) -> torch.Tensor:
        """Logits [B, V] of a decode step; the view is overwritten by the next replay."""
        b = input_ids.shape[0]
        bs = self.sizes[bisect.bisect_left(self.sizes, b)]
        self.ids[:b].copy_(input_ids, non_blocking=True)
        self.pos[:b].copy_(positions, non_blocking=True)
        self.slots[:b].copy_(meta.slot_mapping, non_blocking=True)
        self.ctx[:b].copy_(meta.context_lens, non_blocking=True)
        if bs > b:
            self.slots[b:bs].fill_(-1)
            self.ctx[b:bs].fill_(0)
        w = meta.block_tables.shape[1]
        self.tables[:b, :w].copy_(meta.block_tables, non_blocking=True)
        graph, out = self.graphs[bs]
        graph.replay()
        return out[:b]

    @contextmanager
    def _trace(self, bs: int) -> Iterator[None]:
        """With --mark-trace: one gzip Chrome trace per size, covering warm-up and capture (the
        capture alone has an empty GPU track: kernels are recorded, not run)."""
        if self.trace_dir is None:
            yield
            return
        more = os.environ.get("ATOM_PROFILER_MORE") == "1"
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=more, with_stack=more,
                                    profile_memory=more) as prof:
            with torch.profiler.record_function(f"capture[bs={bs} q=1]"):
                yield
        out = Path(self.trace_dir) / "capture_traces" / f"bs_{bs}_q_1_rank{self.rank}.json.gz"
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            with open(raw, "rb") as src, gzip.open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)


def capture_sizes(requested: list[int], max_num_seqs: int) -> list[int]:
    """The requested sizes that a step can reach (no larger than max_num_seqs), plus
    max_num_seqs itself when no requested size covers it."""
    sizes = sorted({s for s in requested if s <= max_num_seqs})
    if not sizes or sizes[-1] < min(max_num_seqs, max(requested)):
        sizes.append(min(max_num_seqs, max(requested)))
    return sizes


def graphs_enabled(enforce_eager: bool, level: int, device: torch.device, backend: str) -> bool:
    """Graphs need CUDA and a backend whose attention reads lengths on the device (torch's
    reference loops over host lists, so it cannot be captured); level 0 means plain eager."""
    return (not enforce_eager and level >= 1 and device.type == "cuda" and backend == "triton")
