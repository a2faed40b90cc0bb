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
writes them again before any query reads them. The drafting is queued right behind the verify
step: what depends on the drafts each row kept is computed on the device from the step's
verdict (verdict.py), the host's part of every depth's inputs goes in one copy (draft_plan.py),
so nothing waits for the device, the verify step's tokens included, until the drafts and the
kept counts are read back together, once, when the engine asks for them (`Drafted.read`); the
next step may be queued before that, reading the drafts on the device (`Drafted.columns`).

Each drafter's forwards (its catch-up and its one-position decode) are `DraftForward`s: a
function of (ids, positions, *inputs) run under the drafter's forward context, which the runner
may capture as CUDA graphs (`use_graphs`); a step a graph fits replays it, any other runs the
same function eagerly.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional, Protocol, Sequence

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext, ForwardSlot
from atom.layers.sampler import probabilities
from atom.sampling_params import SamplingParams
from atom.spec_decode.draft_plan import (CatchUpInputs, DraftPlan, DraftPlanner, HostCopies, Kept,
                                         Sampling, ScheduledRequest, Stager)
from atom.spec_decode.rejection import DraftedRows


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
    # [B] int64 how far each row's start moved on the device (draft_plan.StepRows.shift)
    shift: Optional[torch.Tensor] = None


@dataclass
class CaughtUp:
    """A drafter's state once it has run over the step, per sampling row: the first decode's
    input token, or the first drafts' logits when the catch-up already gave them (then the
    drafts picked from them are that decode's input), and what the decode reads besides."""

    tokens: Optional[torch.Tensor]  # [R] the first decode's input, when logits is None
    logits: Optional[torch.Tensor]  # [R, V]
    state: Optional[torch.Tensor]  # [R, ...]


Column = tuple[torch.Tensor, Optional[torch.Tensor]]  # every sampling row's drafts, their q


class Drafted:
    """A propose's drafts, on the device until the host asks: reading them waits for the
    drafting, so the engine reads them once the step resolves, and a step queued before that
    takes them from `columns`."""

    def __init__(self, columns: Optional[torch.Tensor],
                 reader: Callable[[], dict[int, list[int]]]) -> None:
        """columns: [C, R] every column's drafts of the sampling rows (None when none)."""
        self.columns = columns
        self._reader: Optional[Callable[[], dict[int, list[int]]]] = reader
        self._read: dict[int, list[int]] = {}

    def read(self) -> dict[int, list[int]]:
        """Batch index → the drafts made for it; waits for the device the first time."""
        if self._reader is not None:
            self._read, self._reader = self._reader(), None
        return self._read


NOTHING_DRAFTED = Drafted(None, dict)

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


def next_tokens(step: DraftStep, inputs: CatchUpInputs) -> torch.Tensor:
    """The token after each of the step's positions [T] (draft_plan.py: the next input inside
    a row, the kept tokens at its sampled positions, the prompt's next one after a chunk)."""
    ids = torch.roll(step.input_ids, -1)
    if inputs.fix_idx is not None:
        ids[inputs.fix_idx] = inputs.fix_token
    return ids


class Drafter(ABC):
    """The shared loop; a drafter supplies `_catch_up` and `_decode` over its `forwards`."""

    # Whether the catch-up's forward gives the first drafts' logits (MTP's layer, EAGLE-3's
    # head: position i reads the token after i), or only the first decode's input token.
    catch_up_drafts: ClassVar[bool] = True

    def __init__(self, k: int, block_size: int, max_model_len: int, vocab_size: int,
                 slot: ForwardSlot, kv_caches: list, kv_scales: list, stager: Stager,
                 forwards: dict[str, DraftForward]) -> None:
        """vocab_size: the drafts' logits' width (the target's vocabulary); slot, kv_caches,
        kv_scales: the forward context the drafter's layers read (the target's for MTP's layer,
        its own for a draft model's); stager: the one host→device copy of each propose's inputs
        (draft_plan.py); forwards: its CATCH_UP and DECODE, the runner may capture them."""
        self.k = k
        self.forwards = forwards
        self.slot, self.kv_caches, self.kv_scales = slot, kv_caches, kv_scales
        self.planner = DraftPlanner(stager, block_size, max_model_len, vocab_size)
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
        with self.slot.using(ForwardContext(meta, self.kv_caches, self.kv_scales)):
            return self.forwards[name].fn(ids, positions, *inputs)

    @abstractmethod
    def _catch_up(self, step: DraftStep, inputs: CatchUpInputs) -> CaughtUp:
        """Run over the whole step (rows that sampled nothing too); the CaughtUp of its
        sampling rows (logits given exactly when catch_up_drafts)."""

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
    def propose(self, reqs: list[ScheduledRequest], step: DraftStep, kept: Optional[Kept]
                ) -> Drafted:
        """Bring the drafter's KV up to date with the whole step and draft for each sampling
        row. kept: the verify step's outcome on the device (None when no row sampled).
        Everything is queued without waiting for the device, the verify step's tokens
        included: the plan's one staged copy holds the host's part of every depth's inputs,
        the rest follows from `kept` there; the drafts are read when asked (Drafted)."""
        decodes = self.k - 1 if self.catch_up_drafts else self.k
        plan = self.planner.plan(reqs, step, kept, decodes)
        up = self._catch_up(step, plan.catch_up)
        if kept is None or not step.rows:
            return NOTHING_DRAFTED
        columns: list[Column] = []
        tokens, state = up.tokens, up.state
        if up.logits is not None:
            columns.append(self._pick(up.logits, plan.sampling))
            tokens = columns[-1][0]
        for depth in plan.depths:
            assert tokens is not None
            logits, state = self._decode(depth.positions, tokens, state, depth.meta)
            columns.append(self._pick(logits, plan.sampling))
            tokens = columns[-1][0]
        assert plan.live is not None  # a plan with kept counts
        drafts = torch.stack([t for t, _ in columns])
        # queued here, behind the drafting: a later read waits for it, not for the next step
        copies = self.planner.stager.read_later(torch.cat([plan.live, drafts.reshape(-1)]))
        return Drafted(drafts, lambda: self._collect(reqs, step, plan, copies, columns))

    @staticmethod
    def _pick(logits: torch.Tensor, sampling: Optional[Sampling]
              ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(a draft per row, q of the rows [n, V], or None when all are greedy): greedy rows'
        q is one-hot and never stored."""
        greedy = logits.argmax(-1)
        if sampling is None:
            return greedy, None
        q = probabilities(logits, sampling.temperatures, sampling.top_ks, sampling.top_ps)
        noise = torch.ones_like(q)
        for n, gen in sampling.draws:
            noise[n].exponential_(generator=gen)
        sampled = (q / noise).argmax(-1)
        return torch.where(sampling.temperatures == 0, greedy, sampled), q

    @staticmethod
    def _read_drafts(copies: HostCopies) -> list[int]:
        """Each row's live depths, then every column's drafts in column order, in one
        device→host copy: a propose's only wait for the device."""
        (flat,) = copies.wait()
        return flat.tolist()

    def _collect(self, reqs: list[ScheduledRequest], step: DraftStep, plan: DraftPlan,
                 copies: HostCopies, columns: list[Column]) -> dict[int, list[int]]:
        """Per row, its drafts column by column up to its first dead depth; rows that sample
        keep their q for the step that verifies these drafts."""
        n = len(step.rows)
        flat = self._read_drafts(copies)
        live_n, flat = flat[:n], flat[n:]
        before = len(columns) - len(plan.depths)  # the catch-up's column, when it drafts
        drafts: dict[int, list[int]] = {}
        for i, row in enumerate(step.rows):
            made = before + live_n[i]
            drafts[row] = [flat[c * n + i] for c in range(made)]
            if made and columns[0][1] is not None and step.params[i].temperature > 0:
                q = torch.stack([probs[i] for _, probs in columns[:made]])
                self._q[reqs[row].request_id] = (drafts[row], q)
        return drafts
