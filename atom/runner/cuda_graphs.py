"""CUDA graphs of a step's forward: one per batch size at one query length, replayed padded.

Decode steps of small models are launch-bound (hundreds of tiny kernels), so the forward for
each size in `runtime.cudagraph_capture_sizes` is captured once at start-up, all graphs sharing
one memory pool (largest first, so smaller ones reuse its blocks). A speculative step has the
same shape with q tokens per sequence: the target verifying k drafts (q = 1 + k), a drafter
catching up over that step, and each draft depth (q = 1); one StepGraphs serves one q.

A step replays the smallest captured size >= its sequence count B. A graph of q queries takes a
step where every sequence has exactly q (`takes`): the attention kernels and their tiles, which
follow the batch's longest query, are then those the eager step runs. A `ragged` graph (GQA
attention, whose multi-query kernel gives a row the same keys, splits and summation order
whatever the batch's longest query) also takes steps of fewer queries in some sequences (an n-gram row with fewer drafts, a
decode beside verifies): each sequence's tokens sit right-aligned in its q slots
(`ragged_layout`), the slots before them pad queries at the positions just before the
sequence's first token, which attend to its cached prefix (finite values, no KV write) and are
dropped from the outputs. MLA's kernel tiles follow the longest query, so MLA graphs are exact-q
only. The inputs are copied into static buffers and the pad rows get slot -1 (no KV write) and
context length 0 (attention writes zeros there). The attention kernels read every length from
these buffers on the device, so one graph serves any contexts. A drafter's extra inputs (the
target's hidden states, the previous depth's output) are static buffers too.
"""
from __future__ import annotations

import bisect
import dataclasses
import gzip
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext, ForwardSlot
from atom.runner.host_staging import HostStager

log = logging.getLogger("atom.runner")

# (ids, positions, *inputs) → outputs, one row per token, under the forward context
GraphFn = Callable[..., tuple[torch.Tensor, ...]]
Pool = Optional[tuple[int, int]]  # torch.cuda.graph_pool_handle's value


def takes(meta: AttentionMetadata, n_tokens: int, q_len: int, max_bs: int) -> bool:
    """Whether a step of n_tokens can replay a graph of q_len queries per sequence: every
    sequence has exactly q_len (the longest has q_len and they sum to q_len per sequence) and
    there are at most max_bs of them."""
    b = meta.num_seqs
    return 0 < b <= max_bs and meta.max_q_len == q_len and b * q_len == n_tokens


def takes_ragged(meta: AttentionMetadata, q_len: int, max_bs: int) -> bool:
    """Whether a ragged graph of q_len queries a sequence can replay a step: a multi-token step
    (no sequence is longer than q_len) of at most max_bs sequences whose query lengths are on
    the host (the layout is built from them)."""
    return (0 < meta.num_seqs <= max_bs and not meta.is_decode
            and meta.max_q_len <= q_len and meta.q_lens_cpu is not None)


def ragged_layout(q_lens: Sequence[int], q_len: int) -> np.ndarray:
    """Where each token of a step goes in a graph of q_len slots a sequence: sequence i's m_i
    tokens in the last m_i of its slots [i * q_len, (i + 1) * q_len)."""
    m = np.asarray(q_lens, dtype=np.int64)
    ends = (np.arange(1, m.size + 1, dtype=np.int64) * q_len)
    first = np.repeat(ends - m, m)
    return first + (np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m))


def bucket(sizes: Sequence[int], batch: int) -> int:
    """The captured size a batch of `batch` sequences replays: the smallest >= batch."""
    return sizes[bisect.bisect_left(sizes, batch)]


def capture_sizes(requested: list[int], max_num_seqs: int) -> list[int]:
    """The requested sizes that a step can reach (no larger than max_num_seqs), plus
    max_num_seqs itself when no requested size covers it."""
    sizes = sorted({s for s in requested if s <= max_num_seqs})
    if not sizes or sizes[-1] < min(max_num_seqs, max(requested)):
        sizes.append(min(max_num_seqs, max(requested)))
    return sizes


def multi_token_sizes(sizes: list[int], q_len: int, max_num_batched_tokens: int) -> list[int]:
    """The decode sizes a step of q_len tokens per sequence can reach: bs * q_len tokens
    within the step's token budget (a larger graph would never replay)."""
    return [s for s in sizes if s * q_len <= max_num_batched_tokens]


@dataclasses.dataclass(frozen=True)
class GraphPlan:
    """The query lengths captured for each forward of a run."""

    target: tuple[int, ...]  # the target's steps: decode, then the verify lengths
    catch_up: tuple[int, ...] = ()  # a runner-side drafter over the target's step
    decode: tuple[int, ...] = ()  # its one-position draft depths


def plan_graphs(k: int, runner_drafter: bool, target_max_q: Optional[int],
                drafter_max_q: Optional[int]) -> GraphPlan:
    """k: drafts a step verifies (0 without speculation); *_max_q: the longest query a
    model's layers can run captured (MLA's absorbed path: longer ones read host lengths), None
    for no limit (GQA, whose graphs are ragged). A runner-side drafter makes k drafts a row but
    at the edges of a sequence, so its target verifies 1 + k. n-gram drafts as far as its match
    goes: an exact-length (MLA) target captures every length 2..1 + k, a ragged one the powers
    of two below 1 + k and 1 + k (a step replays the shortest that holds its longest row, at
    most twice its tokens). A drafter catches up over whatever step the target ran, so it has
    both of its lengths."""
    def fits(q: int, cap: Optional[int]) -> bool:
        return cap is None or q <= cap

    if runner_drafter or not k:
        verify: tuple[int, ...] = (1 + k,) if k else ()
    elif target_max_q is None:
        verify = tuple(sorted({2 ** i for i in range(1, (1 + k).bit_length())} | {1 + k}))
    else:
        verify = tuple(range(2, 2 + k))
    target = (1, *(q for q in verify if fits(q, target_max_q)))
    if not runner_drafter:
        return GraphPlan(target)
    catch_up = (1, 1 + k) if k and fits(1 + k, drafter_max_q) else (1,)
    return GraphPlan(target, catch_up, (1,))


def graphs_enabled(enforce_eager: bool, level: int, device: torch.device, backend: str) -> bool:
    """Graphs need CUDA and a backend whose attention reads lengths on the device (torch's
    reference loops over host lists, so it cannot be captured); level 0 means plain eager."""
    return (not enforce_eager and level >= 1 and device.type == "cuda" and backend == "triton")


class StepGraphs:
    """One forward captured at every size of `sizes`, q_len queries per sequence, over one
    model's forward slot and KV pool."""

    def __init__(self, forward: GraphFn, sizes: list[int], q_len: int, max_blocks_per_seq: int,
                 slot: ForwardSlot, kv_caches: list, kv_scales: list, device: torch.device,
                 inputs: Sequence[tuple[int, torch.dtype]] = (), name: str = "",
                 ragged: bool = False, trace_dir: Optional[str] = None, rank: int = 0) -> None:
        """inputs: width and dtype of each input after (ids, positions), one row per token;
        name: what the trace files and log lines call this forward ("" = the target's);
        ragged: also take steps of fewer queries in some sequences (module doc)."""
        self.forward, self.slot, self.q_len, self.name = forward, slot, q_len, name
        self.ragged = ragged and q_len > 1
        self.sizes = sorted(set(int(s) for s in sizes))
        self.max_bs = self.sizes[-1]
        self.kv_caches, self.kv_scales = kv_caches, kv_scales
        self.trace_dir, self.rank = trace_dir, rank
        n, dev = self.max_bs * q_len, device
        self.ids = torch.zeros(n, dtype=torch.long, device=dev)
        self.pos = torch.zeros(n, dtype=torch.long, device=dev)
        self.slots = torch.full((n,), -1, dtype=torch.int64, device=dev)
        self.inputs = [torch.zeros((n, w), dtype=dt, device=dev) for w, dt in inputs]
        self.ctx = torch.zeros(self.max_bs, dtype=torch.int32, device=dev)
        self.tables = torch.zeros((self.max_bs, max_blocks_per_seq), dtype=torch.int32,
                                  device=dev)
        self.cu = torch.arange(0, n + 1, q_len, dtype=torch.int32, device=dev)
        self.stager = HostStager(dev)  # a ragged step's layout: a pageable copy would wait
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...]]] = {}

    def meta(self, bs: int) -> AttentionMetadata:
        """The static metadata of size bs: what the forward is captured with. A multi-token
        graph names its query lengths on the host (MLA picks its absorbed path from them) and no
        context lengths (they change every replay)."""
        q = self.q_len
        return AttentionMetadata(
            cu_seqlens_q=self.cu[:bs + 1], context_lens=self.ctx[:bs],
            block_tables=self.tables[:bs], slot_mapping=self.slots[:bs * q], max_q_len=q,
            max_context_len=self.tables.shape[1], is_decode=q == 1,
            q_lens_cpu=None if q == 1 else [q] * bs)

    def args(self, bs: int) -> tuple[torch.Tensor, ...]:
        """The forward's arguments at size bs: views of the static buffers."""
        n = bs * self.q_len
        return (self.ids[:n], self.pos[:n], *(x[:n] for x in self.inputs))

    def fits(self, meta: AttentionMetadata, n_tokens: int) -> bool:
        if self.ragged:
            return takes_ragged(meta, self.q_len, self.max_bs)
        return takes(meta, n_tokens, self.q_len, self.max_bs)

    def stage(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
              *inputs: torch.Tensor) -> tuple[int, Optional[torch.Tensor]]:
        """Copy a fitting step into the static buffers, pad rows past it; returns the size
        and, for a ragged step, where its tokens went (None: the first n slots)."""
        b, n, q = meta.num_seqs, input_ids.shape[0], self.q_len
        bs = bucket(self.sizes, b)
        where = None
        sources = ((self.ids, input_ids), (self.pos, positions),
                   (self.slots, meta.slot_mapping), *zip(self.inputs, inputs))
        if n == b * q:
            for buf, x in sources:
                buf[:n].copy_(x, non_blocking=True)
        else:
            assert meta.q_lens_cpu is not None
            (where,) = self.stager.stage(ragged_layout(meta.q_lens_cpu, q))
            self._pad_queries(meta.context_lens)
            for buf, x in sources:
                buf.index_copy_(0, where, x.to(buf.dtype))
        self.ctx[:b].copy_(meta.context_lens, non_blocking=True)
        if bs > b:
            self.slots[b * q:bs * q].fill_(-1)
            self.ctx[b:bs].fill_(0)
        w = meta.block_tables.shape[1]
        self.tables[:b, :w].copy_(meta.block_tables, non_blocking=True)
        return bs, where

    def _pad_queries(self, context_lens: torch.Tensor) -> None:
        """Every slot of the step's sequences as a pad query at the position its place gives
        (ctx - q + j, from 0 up), writing no KV; the step's own tokens are copied over them."""
        q, b = self.q_len, context_lens.shape[0]
        back = torch.arange(q, device=self.pos.device) - q
        self.pos[:b * q].copy_((context_lens[:, None] + back).clamp_(min=0).view(-1))
        self.slots[:b * q].fill_(-1)

    def replay(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
               *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The forward's outputs for the step's tokens: views overwritten by the next replay
        (a ragged step's are gathered copies)."""
        bs, where = self.stage(input_ids, positions, meta, *inputs)
        graph, out = self.graphs[bs]
        graph.replay()
        if where is not None:
            return tuple(o.index_select(0, where) for o in out)
        n = input_ids.shape[0]
        return tuple(o[:n] for o in out)

    @torch.inference_mode()
    def capture(self, pool: Pool = None) -> tuple[float, Pool]:
        """Capture every size, largest first, in `pool` (shared with graphs captured before);
        returns the seconds it took and the pool for the next."""
        t0 = time.perf_counter()
        for bs in reversed(self.sizes):
            with self._trace(bs), self.slot.using(
                    ForwardContext(self.meta(bs), self.kv_caches, self.kv_scales)):
                self.forward(*self.args(bs))  # warm-up: compiles, sizes the pool
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = self.forward(*self.args(bs))
                torch.cuda.synchronize()
            pool = graph.pool()
            self.graphs[bs] = (graph, out)
        return time.perf_counter() - t0, pool

    @contextmanager
    def _trace(self, bs: int) -> Iterator[None]:
        """With --mark-trace: one gzip Chrome trace per size, covering warm-up and capture (the
        capture alone has an empty GPU track: kernels are recorded, not run)."""
        if self.trace_dir is None:
            yield
            return
        more = os.environ.get("ATOM_PROFILER_MORE") == "1"
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        label = f"{self.name}_" if self.name else ""
        with torch.profiler.profile(activities=acts, record_shapes=more, with_stack=more,
                                    profile_memory=more) as prof:
            with torch.profiler.record_function(f"capture[{label}bs={bs} q={self.q_len}]"):
                yield
        out = (Path(self.trace_dir) / "capture_traces"
               / f"{label}bs_{bs}_q_{self.q_len}_rank{self.rank}.json.gz")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            with open(raw, "rb") as src, gzip.open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)


def first_fitting(graphs: Iterable[Optional[StepGraphs]], meta: AttentionMetadata,
                  n_tokens: int) -> Optional[StepGraphs]:
    """The captured forward a step replays, None when it runs eager."""
    return next((g for g in graphs if g is not None and g.fits(meta, n_tokens)), None)
