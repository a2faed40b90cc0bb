"""What a drafter's propose reads on the device, worked out on the host before its first forward
and sent in one pinned copy.

A `torch.tensor(list, device="cuda")` copies from pageable memory, and such a copy waits for the
whole stream (runner/host_staging.py): made at every draft depth, each depth's small inputs would
wait for the previous depth's forward, so the host could prepare a depth only once the GPU had
run the one before, and the two would never overlap (EAGLE-3 at k = 7: some 40 waits a step).
Nothing a depth needs depends on the drafts: with p the position whose output predicts a
sampling row's last kept token, its j-th one-position decode runs at p + 1 + j while that
position has a slot in the row's blocks (the scheduler's lookahead, from free blocks only). So
every depth's rows, positions, context lengths, slots and sampling settings, and the catch-up's
next tokens and selections, are known at once: `DraftPlanner.plan` stages them together, the
depths run on views of that one copy, and only the final drafts are read back.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np
import torch

from atom.kernels.metadata import AttentionMetadata
from atom.sampling_params import SamplingParams


class Stager(Protocol):
    """runner/host_staging.py's HostStager, which sits above this package: device tensors of
    these arrays from one asynchronous pinned copy (the arrays themselves on the CPU)."""

    def stage(self, *arrays: np.ndarray) -> list[torch.Tensor]: ...


class ScheduledRequest(Protocol):
    """What a drafter reads of a request's share of the step (runner/scheduler_output.py's
    ScheduledRequest, which sits above this package)."""

    request_id: str
    start: int
    token_ids: list[int]
    block_table: list[int]
    next_token: Optional[int]


class StepRows(Protocol):
    """What the plan reads of the step just launched (drafter.DraftStep): its query lengths
    and block tables, its sampling rows and their settings."""

    meta: AttentionMetadata
    rows: list[int]  # batch indices that sampled
    counts: list[int]  # sampled positions of each row
    params: list[SamplingParams]  # per row
    generators: list[Optional[torch.Generator]]  # per row


@dataclass
class Sampling:
    """How one column's rows turn logits into drafts when any of them samples (a column of
    greedy rows has none: its drafts are the argmax)."""

    temperatures: torch.Tensor  # [n] float32, 0 for greedy rows
    top_ks: Optional[torch.Tensor]  # [n] int64, None when no row truncates
    top_ps: Optional[torch.Tensor]  # [n] float32, None when no row truncates
    draws: list[tuple[int, Optional[torch.Generator]]]  # (row in the column, its generator)


@dataclass
class CatchUpInputs:
    """What a catch-up reads besides the step, per sampling row R: where its last kept token
    is predicted, that token, and the step's next tokens where they are not its next inputs."""

    last_idx: torch.Tensor  # [R] int64, the step's token index whose output predicts it
    last_token: torch.Tensor  # [R] int64
    fix_idx: Optional[torch.Tensor]  # [F] int64 token indices, None when F = 0
    fix_token: Optional[torch.Tensor]  # [F] int64 the token after each


@dataclass
class Depth:
    """One one-position decode of the rows still live, on the previous column's outputs."""

    live: list[int]  # its rows, as indices into the step's sampling rows
    sel: Optional[torch.Tensor]  # [n] the previous column's rows that stay; None = all
    positions: torch.Tensor  # [n] int64
    meta: AttentionMetadata
    sampling: Optional[Sampling]


@dataclass
class DraftPlan:
    catch_up: CatchUpInputs
    first: Optional[Sampling]  # the catch-up's column (every sampling row), when it drafts
    depths: list[Depth]


class _Pack:
    """Host arrays queued for one staged copy; a handle is an array's place in the queue."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []

    def put(self, values: Sequence[int] | Sequence[float], dtype: type) -> int:
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
class _HostDepth:
    """A Depth before the copy: handles (_Pack) where it will hold tensors."""

    live: list[int]
    sel: Optional[int]
    tables: Optional[int]  # batch rows whose block tables it reads; None = the step's, whole
    positions: int
    ctx: list[int]
    ctx_handle: int
    slots: int
    sampling: Optional[_HostSampling]


class DraftPlanner:
    """Builds a drafter's DraftPlan; holds what every plan of the drafter shares."""

    def __init__(self, stager: Stager, block_size: int, max_model_len: int, vocab_size: int,
                 split_counters: torch.Tensor) -> None:
        """vocab_size: the drafts' logits' width (the target's vocabulary); split_counters:
        the drafter's decode kernel's (AttentionMetadata.split_counters)."""
        self.stager, self.block_size, self.max_model_len = stager, block_size, max_model_len
        self.vocab_size, self.split_counters = vocab_size, split_counters

    def plan(self, reqs: list[ScheduledRequest], step: StepRows, kept: dict[int, list[int]],
             decodes: int, catch_up_drafts: bool) -> DraftPlan:
        """decodes: one-position decodes at most; catch_up_drafts: whether the catch-up's
        forward gives the first column (its sampling is planned too)."""
        pack = _Pack()
        last_pos, catch_up = self._catch_up(pack, reqs, step, kept)
        n_rows = len(step.rows)
        cu = pack.put(np.arange(n_rows + 1), np.int32)
        first = self._sampling(pack, step, list(range(n_rows))) if catch_up_drafts else None
        depths = self._depths(pack, reqs, step, last_pos, decodes)
        views = self.stager.stage(*pack.arrays)
        return DraftPlan(CatchUpInputs(*(None if h is None else views[h] for h in catch_up)),
                         None if first is None else first.resolve(views),
                         [self._resolve(d, step.meta, views[cu], views) for d in depths])

    @staticmethod
    def _catch_up(pack: _Pack, reqs: list[ScheduledRequest], step: StepRows,
                  kept: dict[int, list[int]]) -> tuple[list[int], list[Optional[int]]]:
        """(per sampling row, the position whose output predicts its last kept token; the
        catch-up's handles in CatchUpInputs' order). The token after each of the step's
        positions is its next input but at a row's sampled positions (the kept tokens there,
        the last one past a rejection) and at the end of a chunk (the prompt's next token)."""
        q_lens = step.meta.q_lens_cpu or []
        ends = list(itertools.accumulate(q_lens))
        last_idx, last_pos, last_token, fix_idx, fix_token = [], [], [], [], []
        for row, m in zip(step.rows, step.counts):
            toks, end = kept[row], ends[row]
            a = len(toks) - 1
            last_idx.append(end - m + a)
            last_pos.append(reqs[row].start + q_lens[row] - m + a)
            last_token.append(toks[-1])
            for j in range(m):
                fix_idx.append(end - m + j)
                fix_token.append(toks[min(j, a)])
        for row, req in enumerate(reqs):
            if req.next_token is not None:
                fix_idx.append(ends[row] - 1)
                fix_token.append(req.next_token)
        fixes = ([pack.put(fix_idx, np.int64), pack.put(fix_token, np.int64)] if fix_idx
                 else [None, None])
        return last_pos, [pack.put(last_idx, np.int64), pack.put(last_token, np.int64), *fixes]

    def _depths(self, pack: _Pack, reqs: list[ScheduledRequest], step: StepRows,
                last_pos: list[int], decodes: int) -> list[_HostDepth]:
        """Decode j runs at last_pos + 1 + j for the rows whose position has a slot; the slot
        limit only falls behind as j grows, so the live rows shrink and the first depth with
        none ends the plan."""
        bs = self.block_size
        tables = [reqs[row].block_table for row in step.rows]
        limits = [min(len(t) * bs, self.max_model_len) for t in tables]
        whole = list(range(step.meta.num_seqs))
        prev, out = list(range(len(step.rows))), []
        for j in range(decodes):
            keep = [n for n, i in enumerate(prev) if last_pos[i] + 1 + j < limits[i]]
            if not keep:
                break
            live = [prev[n] for n in keep]
            pos = [last_pos[i] + 1 + j for i in live]
            batch_rows = [step.rows[i] for i in live]
            slots = [tables[i][p // bs] * bs + p % bs for i, p in zip(live, pos)]
            ctx = [p + 1 for p in pos]
            out.append(_HostDepth(
                live, None if len(keep) == len(prev) else pack.put(keep, np.int64),
                None if batch_rows == whole else pack.put(batch_rows, np.int64),
                pack.put(pos, np.int64), ctx, pack.put(ctx, np.int32), pack.put(slots, np.int64),
                self._sampling(pack, step, live)))
            prev = live
        return out

    def _sampling(self, pack: _Pack, step: StepRows, live: list[int]
                  ) -> Optional[_HostSampling]:
        """None when every row is greedy; top-k and top-p only when a row truncates."""
        params = [step.params[i] for i in live]
        if all(p.temperature == 0 for p in params):
            return None
        vocab = self.vocab_size
        ks = (pack.put([min(p.top_k, vocab) if p.top_k > 0 else vocab for p in params], np.int64)
              if any(0 < p.top_k < vocab for p in params) else None)
        ps = (pack.put([p.top_p for p in params], np.float32)
              if any(p.top_p < 1.0 for p in params) else None)
        draws = [(n, step.generators[i]) for n, i in enumerate(live)
                 if params[n].temperature > 0]
        return _HostSampling(pack.put([p.temperature for p in params], np.float32), ks, ps,
                             draws)

    def _resolve(self, d: _HostDepth, step_meta: AttentionMetadata, cu: torch.Tensor,
                 views: list[torch.Tensor]) -> Depth:
        """One query per live row, attending to everything before it in the row's blocks."""
        n = len(d.live)
        tables = (step_meta.block_tables if d.tables is None
                  else step_meta.block_tables.index_select(0, views[d.tables]))
        meta = AttentionMetadata(
            cu_seqlens_q=cu[:n + 1], context_lens=views[d.ctx_handle], block_tables=tables,
            slot_mapping=views[d.slots], max_q_len=1, max_context_len=max(d.ctx),
            is_decode=True, q_lens_cpu=[1] * n, context_lens_cpu=d.ctx,
            split_counters=self.split_counters)
        return Depth(d.live, None if d.sel is None else views[d.sel], views[d.positions], meta,
                     None if d.sampling is None else d.sampling.resolve(views))
