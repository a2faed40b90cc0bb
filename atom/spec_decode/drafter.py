"""What every runner-side drafter shares: the k-deep draft loop after a verified step, greedy or
sampled drafts with their q, and the q kept until the step that verifies them.

A drafter first catches up on the step (`_catch_up`: its own forward over the step's tokens at
the target's positions and slots, so its KV cache holds what the kept tokens give), which may
already give the first drafts' logits (MTP's next-n layer: position i reads the token after i).
Then it decodes one position at a time (`_decode`) on its own drafts, in the sequence's blocks
past its tokens, until each sampling row has k drafts or its next position has no slot. Greedy
rows (temperature 0) take the argmax; the others sample from q (their own temperature, top-k
and top-p on the drafter's logits) with their own generator, and q is kept for the rejection
sampler at the step that verifies them. Positions past a rejection hold tokens that were not
kept: their slots lie past the sequence's kept length and the next step, which starts there,
writes them again before any query reads them.

Each drafter's forwards (its catch-up and its one-position decode) are `DraftForward`s: a
function of (ids, positions, *inputs) run under the drafter's forward context, which the runner
may capture as CUDA graphs (`use_graphs`); a step a graph fits replays it, any other runs the
same function eagerly.
"""
from __future__ import annotations

import dataclasses
import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext, ForwardSlot
from atom.layers.sampler import probabilities
from atom.sampling_params import SamplingParams
from atom.spec_decode.rejection import DraftedRows


class ScheduledRequest(Protocol):
    """What a drafter reads of a request's share of the step (runner/scheduler_output.py's
    ScheduledRequest, which sits above this package)."""

    request_id: str
    start: int
    token_ids: list[int]
    block_table: list[int]
    next_token: Optional[int]


@dataclass
class DraftStep:
    """What a drafter reads of the step just launched (the runner's device tensors)."""

    input_ids: torch.Tensor  # [T], pending tokens already filled in
    positions: torch.Tensor  # [T]
    meta: AttentionMetadata
    hidden: torch.Tensor  # [T, H] the target's final hidden states
    rows: list[int]  # batch indices that sampled
    counts: list[int]  # sampled positions of each row
    params: list[SamplingParams]  # per row
    generators: list[Optional[torch.Generator]]  # per row (seeded requests at temperature > 0)
    extras: tuple[torch.Tensor, ...] = ()  # [T, ...] what target_outputs added to the forward


@dataclass
class CaughtUp:
    """A drafter's state once it has run over the step: per sampling row, the position its
    next decode runs at (before any draft), that decode's input token, and the first drafts'
    logits when the catch-up already gave them (then `tokens` is unused until they are picked)."""

    next_pos: list[int]
    tokens: Optional[torch.Tensor]  # [R] the next decode's input, when logits is None
    logits: Optional[torch.Tensor]  # [R, V]
    state: Optional[torch.Tensor]  # [R, ...] what the next decode reads besides the token


Column = tuple[list[int], torch.Tensor, Optional[torch.Tensor]]  # live rows, drafts, their q

CATCH_UP, DECODE = "catch_up", "decode"  # the names of a drafter's two forwards


@dataclass(frozen=True)
class DraftForward:
    """A forward in the form a CUDA graph captures: fn(ids, positions, *inputs) → outputs, one
    row per token; `inputs` gives each input's width and dtype (the graph's static buffers)."""

    fn: Callable[..., tuple[torch.Tensor, ...]]
    inputs: tuple[tuple[int, torch.dtype], ...] = ()


class Graphed(Protocol):
    """A captured forward (runner/cuda_graphs.py's StepGraphs, which sits above this package)."""

    def fits(self, meta: AttentionMetadata, n_tokens: int) -> bool: ...

    def replay(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
               *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


def last_kept(reqs: list[ScheduledRequest], step: DraftStep, kept: dict[int, list[int]]
              ) -> tuple[list[int], list[int]]:
    """Per sampling row, the step's token index and the position of the token before its last
    kept one: the position whose output predicts that kept token."""
    q_lens = step.meta.q_lens_cpu or []
    ends = list(itertools.accumulate(q_lens))
    idx, pos = [], []
    for row, m in zip(step.rows, step.counts):
        a = len(kept[row]) - 1
        idx.append(ends[row] - m + a)
        pos.append(reqs[row].start + q_lens[row] - m + a)
    return idx, pos


def next_tokens(reqs: list[ScheduledRequest], step: DraftStep, kept: dict[int, list[int]]
                 ) -> torch.Tensor:
    """The token after each of the step's positions [T]: the next input inside a row, the
    kept tokens at its sampled positions (the last kept one past a rejection), the prompt's
    next token at the end of a chunk."""
    q_lens = step.meta.q_lens_cpu or []
    ends = list(itertools.accumulate(q_lens))
    fix_idx, fix_tok = [], []
    for row, m in zip(step.rows, step.counts):
        toks, end = kept[row], ends[row]
        for j in range(m):
            fix_idx.append(end - m + j)
            fix_tok.append(toks[min(j, len(toks) - 1)])
    for row, req in enumerate(reqs):
        if req.next_token is not None:
            fix_idx.append(ends[row] - 1)
            fix_tok.append(req.next_token)
    dev = step.input_ids.device
    ids = torch.roll(step.input_ids, -1)
    if fix_idx:
        ids[torch.tensor(fix_idx, device=dev)] = torch.tensor(fix_tok, device=dev)
    return ids


class Drafter(ABC):
    """The shared loop; a drafter supplies `_catch_up` and `_decode` over its `forwards`."""

    def __init__(self, k: int, block_size: int, max_model_len: int, slot: ForwardSlot,
                 kv_caches: list, kv_scales: list, split_counters: torch.Tensor,
                 forwards: dict[str, DraftForward]) -> None:
        """slot, kv_caches, kv_scales: the forward context the drafter's layers read (the
        target's for MTP's layer, its own for a draft model's); split_counters: its decode
        kernel's (sized by its own KV heads); forwards: its CATCH_UP and DECODE, the runner
        may capture them."""
        self.k, self.block_size, self.max_model_len = k, block_size, max_model_len
        self.forwards = forwards
        self.slot, self.kv_caches, self.kv_scales = slot, kv_caches, kv_scales
        self.split_counters = split_counters
        # request id → (the sampled drafts, their q [len, V]) until the step that verifies them
        self._q: dict[str, tuple[list[int], torch.Tensor]] = {}
        self._graphs: dict[str, list[Graphed]] = {}

    def target_outputs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """What the drafter reads of the target's forward besides its final hidden states,
        taken inside that forward (a CUDA graph of it returns them): none by default."""
        return ()

    def target_forward(self, forward_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                       ) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]:
        """The target's forward as a drafting step runs it, eager or captured: its final
        hidden states, then target_outputs."""
        def forward(ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
            hidden = forward_fn(ids, positions)
            return (hidden, *self.target_outputs(hidden))
        return forward

    def use_graphs(self, name: str, graphs: list[Graphed]) -> None:
        """Captured forms of forwards[name], tried in this order (the shortest query first: a
        graph may take steps of shorter ones); a step that none fits runs eager."""
        self._graphs[name] = graphs

    def _forward(self, name: str, ids: torch.Tensor, positions: torch.Tensor,
                 meta: AttentionMetadata, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """forwards[name] over one step: replayed where a graph fits, else eager."""
        n = ids.shape[0]
        graph = next((g for g in self._graphs.get(name, ()) if g.fits(meta, n)), None)
        if graph is not None:
            return graph.replay(ids, positions, meta, *inputs)
        meta = dataclasses.replace(meta, split_counters=self.split_counters)
        with self.slot.using(ForwardContext(meta, self.kv_caches, self.kv_scales)):
            return self.forwards[name].fn(ids, positions, *inputs)

    @abstractmethod
    def _catch_up(self, reqs: list[ScheduledRequest], step: DraftStep,
                  kept: dict[int, list[int]]) -> CaughtUp: ...

    @abstractmethod
    def _decode(self, positions: torch.Tensor, tokens: torch.Tensor,
                state: Optional[torch.Tensor], meta: AttentionMetadata
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(logits [n, V], the next decode's state) of one query per live row."""

    def forget(self, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            self._q.pop(rid, None)

    def drafted_rows(self, reqs: list[ScheduledRequest], rows: list[int], counts: list[int],
                     generators: list[Optional[torch.Generator]]) -> Optional[DraftedRows]:
        """The step's verifying rows whose drafts this drafter sampled with a q (the drafts
        scheduled are a prefix of those it made: the scheduler may cut them); None if none."""
        out, first = DraftedRows(), 0
        for row, m, gen in zip(rows, counts, generators):
            req = reqs[row]
            stored = self._q.pop(req.request_id, None) if m > 1 else None
            drafts = req.token_ids[-(m - 1):] if m > 1 else []
            if stored is not None and stored[0][:m - 1] == drafts:
                out.firsts.append(first)
                out.counts.append(m)
                out.drafts.append(drafts)
                out.draft_probs.append(stored[1][:m - 1])
                out.generators.append(gen)
            first += m
        return out if out.counts else None

    @torch.inference_mode()
    def propose(self, reqs: list[ScheduledRequest], step: DraftStep, kept: dict[int, list[int]]
                ) -> dict[int, list[int]]:
        """Bring the drafter's KV up to date with the whole step and return each sampling
        row's drafts."""
        up = self._catch_up(reqs, step, kept)
        if not step.rows:
            return {}
        dev = step.input_ids.device
        live = list(range(len(step.rows)))
        columns: list[Column] = []
        tokens, state = up.tokens, up.state
        if up.logits is not None:
            tokens, probs = self._pick(up.logits, step, live)
            columns.append((live, tokens, probs))
        while len(columns) < self.k:
            depth = len(columns)
            keep = [n for n, i in enumerate(live)
                    if self._has_slot(reqs[step.rows[i]], up.next_pos[i] + depth)]
            if not keep:
                break
            sel = torch.tensor(keep, device=dev)
            live = [live[n] for n in keep]
            pos = [up.next_pos[i] + depth for i in live]
            tables = step.meta.block_tables.index_select(
                0, torch.tensor([step.rows[i] for i in live], device=dev))
            meta = self._decode_meta([reqs[step.rows[i]] for i in live], tables, pos)
            assert tokens is not None
            logits, state = self._decode(torch.tensor(pos, device=dev),
                                         tokens.index_select(0, sel),
                                         None if state is None else state.index_select(0, sel),
                                         meta)
            tokens, probs = self._pick(logits, step, live)
            columns.append((live, tokens, probs))
        return self._collect(reqs, step, columns)

    def _has_slot(self, req: ScheduledRequest, pos: int) -> bool:
        return pos < min(len(req.block_table) * self.block_size, self.max_model_len)

    def _decode_meta(self, reqs: list[ScheduledRequest], tables: torch.Tensor, pos: list[int]
                     ) -> AttentionMetadata:
        """One query per row at `pos`, attending to everything before it in the row's blocks."""
        dev, bs, n = tables.device, self.block_size, len(pos)
        slots = [r.block_table[p // bs] * bs + p % bs for r, p in zip(reqs, pos)]
        ctx = [p + 1 for p in pos]
        return AttentionMetadata(
            cu_seqlens_q=torch.arange(n + 1, dtype=torch.int32, device=dev),
            context_lens=torch.tensor(ctx, dtype=torch.int32, device=dev), block_tables=tables,
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev), max_q_len=1,
            max_context_len=max(ctx), is_decode=True, q_lens_cpu=[1] * n, context_lens_cpu=ctx,
            split_counters=self.split_counters)

    def _pick(self, logits: torch.Tensor, step: DraftStep, live: list[int]
              ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(a draft per live row, q of the rows that sample [len(live), V], or None when all
        are greedy): greedy rows' q is one-hot and never stored."""
        params = [step.params[i] for i in live]
        greedy = logits.argmax(-1)
        if all(p.temperature == 0 for p in params):
            return greedy, None
        dev, vocab = logits.device, logits.shape[-1]
        temps = torch.tensor([p.temperature for p in params], device=dev)
        ks = (torch.tensor([min(p.top_k, vocab) if p.top_k > 0 else vocab for p in params],
                           device=dev) if any(0 < p.top_k < vocab for p in params) else None)
        ps = (torch.tensor([p.top_p for p in params], device=dev)
              if any(p.top_p < 1.0 for p in params) else None)
        q = probabilities(logits, temps, ks, ps)
        noise = torch.ones_like(q)
        for n, i in enumerate(live):
            if params[n].temperature > 0:
                noise[n].exponential_(generator=step.generators[i])
        sampled = (q / noise).argmax(-1)
        return torch.where(temps == 0, greedy, sampled), q

    def _collect(self, reqs: list[ScheduledRequest], step: DraftStep, columns: list[Column]
                 ) -> dict[int, list[int]]:
        """Per row, its drafts depth by depth (one host read per depth); rows that sample keep
        their q for the step that verifies these drafts."""
        drafts: dict[int, list[int]] = {row: [] for row in step.rows}
        qs: dict[int, list[torch.Tensor]] = {}
        for live, tokens, probs in columns:
            for n, (i, tok) in enumerate(zip(live, tokens.tolist())):
                drafts[step.rows[i]].append(tok)
                if probs is not None and step.params[i].temperature > 0:
                    qs.setdefault(i, []).append(probs[n])
        for i, rows_q in qs.items():
            row = step.rows[i]
            self._q[reqs[row].request_id] = (drafts[row], torch.stack(rows_q))
        return drafts
