"""What a drafter's propose reads on the device, planned before the host knows how many drafts
the verify step kept, and sent in one pinned copy.

A `torch.tensor(list, device="cuda")` copies from pageable memory, and such a copy waits for the
whole stream (runner/host_staging.py); so does reading the verify step's tokens. The drafting is
queued right behind the verify step instead, and whatever depends on a row's kept count n is
computed on the device from the step's Verdict (verdict.py): with b the position of the row's
first sampled input, its last kept token is predicted at b + n (the token index whose output
gives its first drafts' logits), and its j-th one-position decode runs at b + n + 1 + j while
that position has a slot in its blocks (the scheduler's lookahead, from free blocks only) and
lies within max_model_len. Every depth runs every sampling row, so its shapes, the host's
lengths and the sampling settings do not depend on n: a row whose position has no slot is dead
there (its position clamped to its last slot's, writing no KV: slot -1, reading only its own
blocks), and the host, which reads n with the drafts, drops its drafts from that depth on (the
limit only falls further behind as j grows). The host's part (b, the limits, the block-table
rows, the chunks' next tokens, the sampling settings) is staged together, the depths run on
views of it, and only the drafts and n are read back, once.

Under async scheduling a row's b may not be on the host either: the step was scheduled before
the one before it resolved, its start is where that step's row would stand had it kept none of
its drafts (`ScheduledRequest.unverified` of them), and the runner's `StepRows.shift` says on
the device how many it kept; the host bounds the depths' context lengths by the most it could
have kept, and each row's live depths are counted on the device and read with the drafts.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np
import torch

from atom.kernels.metadata import AttentionMetadata
from atom.sampling_params import SamplingParams


class HostCopies(Protocol):
    """runner/host_staging.py's HostRead: device tensors' copies to the host, queued when it
    was made; `wait` waits for those copies alone, not for work queued after them."""

    def wait(self) -> list[torch.Tensor]: ...


class Stager(Protocol):
    """runner/host_staging.py's HostStager, which sits above this package: device tensors of
    these arrays from one asynchronous pinned copy (the arrays themselves on the CPU), and
    device tensors' copies back, read later."""

    def stage(self, *arrays: np.ndarray) -> list[torch.Tensor]: ...

    def read_later(self, *tensors: torch.Tensor) -> HostCopies: ...


class ScheduledRequest(Protocol):
    """What a drafter reads of a request's share of the step (runner/scheduler_output.py's
    ScheduledRequest, which sits above this package)."""

    request_id: str
    start: int
    token_ids: list[int]
    block_table: list[int]
    next_token: Optional[int]
    unverified: int


class StepRows(Protocol):
    """What the plan reads of the step just launched (drafter.DraftStep): its query lengths
    and block tables, its sampling rows and their settings."""

    meta: AttentionMetadata
    rows: list[int]  # batch indices that sampled
    counts: list[int]  # sampled positions of each row
    params: list[SamplingParams]  # per row
    generators: list[Optional[torch.Generator]]  # per row
    shift: Optional[torch.Tensor]  # [B] int64 what each row's start moved on the device


class Kept(Protocol):
    """What the plan reads of the verify step's outcome (verdict.Verdict)."""

    accepted: torch.Tensor  # [R] int64
    kept: torch.Tensor  # [S] int64
    last: torch.Tensor  # [R] int64


@dataclass
class Sampling:
    """How a column's rows turn logits into drafts when any of them samples (a column of
    greedy rows has none: its drafts are the argmax)."""

    temperatures: torch.Tensor  # [n] float32, 0 for greedy rows
    top_ks: Optional[torch.Tensor]  # [n] int64, None when no row truncates
    top_ps: Optional[torch.Tensor]  # [n] float32, None when no row truncates
    draws: list[tuple[int, Optional[torch.Generator]]]  # (row in the column, its generator)


@dataclass
class CatchUpInputs:
    """What a catch-up reads besides the step: per sampling row R where its last kept token is
    predicted and that token, and the step's next tokens where they are not its next inputs."""

    last_idx: Optional[torch.Tensor]  # [R] int64 the step's token index whose output predicts it
    last_token: Optional[torch.Tensor]  # [R] int64
    fix_idx: Optional[torch.Tensor]  # [F] int64 token indices, None when F = 0
    fix_token: Optional[torch.Tensor]  # [F] int64 the token after each


@dataclass
class Depth:
    """One one-position decode of every sampling row, on the previous column's outputs."""

    positions: torch.Tensor  # [R] int64
    meta: AttentionMetadata


@dataclass
class DraftPlan:
    catch_up: CatchUpInputs
    sampling: Optional[Sampling]  # every column's: the rows are the same at every depth
    depths: list[Depth]
    live: Optional[torch.Tensor]  # [R] int64 per sampling row the depths at a real position


class _Pack:
    """Host arrays queued for one staged copy; a handle is an array's place in the queue."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []

    def put(self, values: Sequence[int] | Sequence[float] | np.ndarray, dtype: type) -> int:
        self.arrays.append(np.asarray(values, dtype=dtype))
        return len(self.arrays) - 1


@dataclass
class _HostSampling:
    """A Sampling before the copy: handles (_Pack) where it will hold tensors."""

    temps: int
    top_ks: Optional[int]
    top_ps: Optional[int]
    draws: list[tuple[int, Optional[torch.Generator]]]

    def resolve(self, views: list[torch.Tensor]) -> Sampling:
        opt = lambda h: None if h is None else views[h]  # noqa: E731
        return Sampling(views[self.temps], opt(self.top_ks), opt(self.top_ps), self.draws)


@dataclass
class _HostRows:
    """Per sampling row what the host knows before the verdict, as handles (_Pack)."""

    base_idx: int  # [R] int64 the token index of its first sampled position
    base: int  # [R] int64 its position
    limits: int  # [R] int64
    tables: Optional[int]  # [R] batch rows whose block tables the depths read; None = all
    cu: int  # [R + 1] int32
    iota: int  # [max(R, decodes) + 1] int64 0, 1, ...
    sampled_idx: Optional[int]  # [S + C] int64 sampled positions' token indices, then chunks'
    chunk_tokens: Optional[int]  # [C] int64 the prompt token after each chunk


class DraftPlanner:
    """Builds a drafter's DraftPlan; holds what every plan of the drafter shares."""

    def __init__(self, stager: Stager, block_size: int, max_model_len: int,
                 vocab_size: int) -> None:
        """vocab_size: the drafts' logits' width (the target's vocabulary)."""
        self.stager, self.block_size, self.max_model_len = stager, block_size, max_model_len
        self.vocab_size = vocab_size

    def plan(self, reqs: list[ScheduledRequest], step: StepRows, kept: Optional[Kept],
             decodes: int) -> DraftPlan:
        """decodes: one-position decodes at most; kept: None when no row sampled."""
        pack = _Pack()
        rows, base, limits = self._rows(pack, reqs, step, decodes)
        sampling = self._sampling(pack, step)
        views = self.stager.stage(*pack.arrays)
        opt = lambda h: None if h is None else views[h]  # noqa: E731
        chunk_tokens = opt(rows.chunk_tokens)
        fix_idx = opt(rows.sampled_idx)
        if kept is None:
            return DraftPlan(CatchUpInputs(None, None, fix_idx, chunk_tokens), None, [], None)
        fix_token = (kept.kept if chunk_tokens is None
                     else torch.cat([kept.kept, chunk_tokens]))
        last_idx = views[rows.base_idx] + kept.accepted
        last_pos = self._base(step, views, rows) + kept.accepted
        depths = self._depths(step, views, rows, base, limits, last_pos, decodes)
        live = (views[rows.limits] - last_pos - 1).clamp(0, decodes)
        return DraftPlan(CatchUpInputs(last_idx, kept.last, fix_idx, fix_token),
                         None if sampling is None else sampling.resolve(views), depths, live)

    @staticmethod
    def _base(step: StepRows, views: list[torch.Tensor], rows: _HostRows) -> torch.Tensor:
        """[R] each sampling row's first sampled position, moved on the device where the host
        scheduled the step before the one before it resolved."""
        base = views[rows.base]
        if step.shift is None:
            return base
        shift = step.shift if rows.tables is None else step.shift.index_select(
            0, views[rows.tables])
        return base + shift

    def _rows(self, pack: _Pack, reqs: list[ScheduledRequest], step: StepRows, decodes: int
              ) -> tuple[_HostRows, list[int], list[int]]:
        """(the handles, per sampling row the most its first sampled position may be and its
        limit). The token after each of the step's positions is its next input but at a row's
        sampled positions (the kept ones) and at the end of a chunk (the prompt's next
        token)."""
        q_lens = step.meta.q_lens_cpu or []
        ends = list(itertools.accumulate(q_lens))
        base_idx = [ends[row] - m for row, m in zip(step.rows, step.counts)]
        base = [reqs[row].start + q_lens[row] - m for row, m in zip(step.rows, step.counts)]
        bs, n_rows = self.block_size, len(step.rows)
        limits = [min(len(reqs[row].block_table) * bs, self.max_model_len) for row in step.rows]
        sampled = [i + j for i, m in zip(base_idx, step.counts) for j in range(m)]
        chunks = [(ends[row] - 1, req.next_token) for row, req in enumerate(reqs)
                  if req.next_token is not None]
        fix = sampled + [i for i, _ in chunks]
        whole = step.rows == list(range(step.meta.num_seqs))
        most = [b + reqs[row].unverified for b, row in zip(base, step.rows)]
        handles = _HostRows(
            pack.put(base_idx, np.int64), pack.put(base, np.int64), pack.put(limits, np.int64),
            None if whole else pack.put(step.rows, np.int64),
            pack.put(np.arange(n_rows + 1), np.int32),
            pack.put(np.arange(max(n_rows, decodes) + 1), np.int64),
            pack.put(fix, np.int64) if fix else None,
            pack.put([t for _, t in chunks], np.int64) if chunks else None)
        return handles, most, limits

    def _depths(self, step: StepRows, views: list[torch.Tensor], rows: _HostRows,
                base: list[int], limits: list[int], last_pos: torch.Tensor, decodes: int
                ) -> list[Depth]:
        """Decode j runs at last_pos + 1 + j, all depths' positions, slots and context lengths
        at once ([decodes, R]); a row dead at j (no slot there) runs at its last slot's
        position, writing none. The host bounds each depth's longest context by the row's
        most drafts kept (its end: b + m, b the most it may be)."""
        if not decodes:
            return []
        bs, n = self.block_size, len(base)
        ends = [b + m for b, m in zip(base, step.counts)]
        limit = views[rows.limits]
        tables = (step.meta.block_tables if rows.tables is None
                  else step.meta.block_tables.index_select(0, views[rows.tables]))
        iota = views[rows.iota]
        pos = last_pos.unsqueeze(0) + iota[1:decodes + 1].unsqueeze(1)  # [decodes, R]
        live = pos < limit
        pos = torch.minimum(pos, limit - 1)
        blocks = tables.to(torch.int64)[iota[:n].unsqueeze(0), pos // bs]
        slots = torch.where(live, blocks * bs + pos % bs, -1)
        ctx = (pos + 1).to(torch.int32)
        cu = views[rows.cu]
        out = []
        for j in range(decodes):
            max_ctx = max(min(e + 1 + j, lim) for e, lim in zip(ends, limits))
            meta = AttentionMetadata(
                cu_seqlens_q=cu, context_lens=ctx[j], block_tables=tables,
                slot_mapping=slots[j], max_q_len=1, max_context_len=max_ctx, is_decode=True,
                q_lens_cpu=[1] * n)
            out.append(Depth(pos[j], meta))
        return out

    def _sampling(self, pack: _Pack, step: StepRows) -> Optional[_HostSampling]:
        """Every sampling row's, None when each is greedy; top-k and top-p only when a row
        truncates."""
        params = step.params
        if all(p.temperature == 0 for p in params):
            return None
        vocab = self.vocab_size
        ks = (pack.put([min(p.top_k, vocab) if p.top_k > 0 else vocab for p in params], np.int64)
              if any(0 < p.top_k < vocab for p in params) else None)
        ps = (pack.put([p.top_p for p in params], np.float32)
              if any(p.top_p < 1.0 for p in params) else None)
        draws = [(n, step.generators[n]) for n, p in enumerate(params) if p.temperature > 0]
        return _HostSampling(pack.put([p.temperature for p in params], np.float32), ks, ps,
                             draws)
