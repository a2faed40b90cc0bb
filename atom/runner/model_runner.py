"""ModelRunner: prepare → forward → sample, reading and writing the paged KV cache."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from atom.kernels.metadata import AttentionMetadata, leading_decodes
from atom.layers.forward_context import ForwardContext, ForwardSlot
from atom.layers.sampler import PenaltyBatch, SamplingBatch, compute_logprobs, sample
from atom.runner.annotation import annotate
from atom.runner.compile import ForwardFn
from atom.runner.cuda_graphs import StepGraphs, first_fitting
from atom.runner.host_staging import HostStager
from atom.runner.kv_cache import KVCache
from atom.runner.launched_step import LaunchedStep
from atom.runner.profiler import StepProfiler
from atom.runner.scheduler_output import PENDING_TOKEN, ScheduledRequest, SchedulerOutput
from atom.sampling_params import SamplingParams
from atom.spec_decode.acceptance import Verifier, forced_counts
from atom.spec_decode.drafter import Drafted, Drafter, DraftStep
from atom.spec_decode.rejection import resample_drafted
from atom.spec_decode.verdict import Verdict, judge


@dataclass
class StepInputs:
    """One step's device inputs (prepare's output)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    rows: list[int]  # batch indices that sample a token this step
    counts: Optional[list[int]]  # positions each of those samples; None = one each
    logits_idx: torch.Tensor  # [positions] the token index of each sampled position
    sampling: SamplingBatch
    # [B] int64 how far each row's start moved on the device (its `unverified` drafts of the
    # step before, as many as that step kept); None when no row moved
    shift: Optional[torch.Tensor] = None


@dataclass
class RunnerRequest:
    """A request's state on the runner's side, kept from its first step to its last."""

    params: SamplingParams
    num_prompt_tokens: int
    generator: Optional[torch.Generator] = None


class ModelRunner:
    """Runs the steps of one model over its KV cache. It builds nothing: atom/runner_builder.py
    hands it the loaded model, the forward to call, the slot the model's layers read their
    forward context from and the allocated cache, then the graphs captured over them
    (use_graphs), so a second runner (a draft model's) is the same assembly over other parts."""

    def __init__(self, model: torch.nn.Module, forward_fn: ForwardFn, slot: ForwardSlot,
                 kv: KVCache, *, device: torch.device,
                 max_model_len: int, vocab_size: int, verify: Verifier, profiler: StepProfiler,
                 drafter: Optional[Drafter] = None) -> None:
        self.model, self.forward_fn, self.slot = model, forward_fn, slot
        self.kv = kv
        # The captured steps (use_graphs); without them every step runs eager.
        self.graphs: Optional[StepGraphs] = None
        self.verify_graphs: list[StepGraphs] = []
        self.device, self.max_model_len, self.verify = device, max_model_len, verify
        # A plain int: a transformers config attribute read costs microseconds, and the hot
        # path reads this once per sequence per step.
        self.vocab_size = vocab_size
        self.block_size = kv.spec.block_size
        self.num_blocks = kv.num_blocks
        self.profiler = profiler
        self.stager = HostStager(device)
        # The previous step's tokens a pending one may be: its sampled tokens, or after a
        # drafting step each row's last kept token, then its drafts column by column; a
        # request's pending token j is at j * _last_stride + its row (_last_row_of).
        self._last_tokens: Optional[torch.Tensor] = None
        self._last_row_of: dict[str, int] = {}
        self._last_stride = 0
        # [rows] the drafts each row of the previous (drafting) step kept, on the device
        self._last_accepted: Optional[torch.Tensor] = None
        self._requests: dict[str, RunnerRequest] = {}  # what a step does not resend
        # A runner-side proposer (specdecode=mtp: a layer of the model; draft_model, eagle3: a
        # model of their own), run after each step's verification.
        self.drafter = drafter
        self._drafting_forward = None if drafter is None else drafter.target_forward(forward_fn)

    def use_graphs(self, decode: Optional[StepGraphs], verify: list[StepGraphs]) -> None:
        """decode: the decode step's graphs (one token per sequence), verify: the verify
        steps' (one query length each); each returns the logits of every token, or with a
        drafter what drafter.target_forward returns. A step none fits runs eager."""
        self.graphs = decode
        self.verify_graphs = sorted(verify, key=lambda g: g.q_len)  # the shortest that fits

    # -- one step ---------------------------------------------------------------------------
    def _track(self, out: SchedulerOutput) -> None:
        for rid in out.finished_ids:
            self._requests.pop(rid, None)
        if self.drafter is not None:
            self.drafter.forget(out.finished_ids)
        for new in out.new_requests:
            self._requests[new.request_id] = RunnerRequest(new.sampling_params,
                                                           new.num_prompt_tokens)

    def prepare(self, out: SchedulerOutput) -> StepInputs:
        """Host lists → device tensors for one step, in one pinned copy (host_staging.py). Built
        with numpy: at 256 decoding sequences with 2k-token contexts the nested-list
        torch.tensor of the block tables alone cost more than the GPU forward of a small model.
        A token still being sampled by the previous step (PENDING_TOKEN) is read from that
        step's device output instead (async scheduling), and so are the drafts a drafter made in
        that step; a row scheduled before that step's verdict (`unverified` > 0) has its
        positions, slots and context length moved on the device by the drafts it kept."""
        self._track(out)
        bs = self.block_size
        reqs = out.requests
        q_lens = [len(r.token_ids) for r in reqs]
        starts, rows, counts, tables = self._scan(reqs)
        ctx = [st + n for st, n in zip(starts, q_lens)]
        cu = np.zeros(len(reqs) + 1, dtype=np.int32)
        np.cumsum(q_lens, out=cu[1:])
        if cu[-1] == len(reqs):  # decode: one token per sequence, fully vectorised
            pos = np.asarray(starts, dtype=np.int64)
            ids = np.fromiter((r.token_ids[0] for r in reqs), dtype=np.int64, count=len(reqs))
            seq_of_tok = np.arange(len(reqs))
        else:
            pos = np.concatenate([np.arange(st, st + n, dtype=np.int64)
                                  for st, n in zip(starts, q_lens)])
            ids = np.fromiter(itertools.chain.from_iterable(r.token_ids for r in reqs),
                              dtype=np.int64, count=int(cu[-1]))
            seq_of_tok = np.repeat(np.arange(len(reqs)), q_lens)
        slots = tables[seq_of_tok, pos // bs].astype(np.int64) * bs + pos % bs
        logits_idx = _sampled_positions(cu, rows, counts)
        pending = np.flatnonzero(ids == PENDING_TOKEN)
        src = self._pending_sources(reqs, seq_of_tok[pending], pending - cu[seq_of_tok[pending]])
        moved = [i for i, r in enumerate(reqs) if r.unverified]
        moving = ([np.asarray(moved, dtype=np.int64), seq_of_tok.astype(np.int64),
                   self._pending_sources(reqs, np.asarray(moved), np.zeros(len(moved)))]
                  if moved else [])
        states = [self._requests[reqs[i].request_id] for i in rows]
        if counts is not None:
            states = [st for st, m in zip(states, counts) for _ in range(m)]
        params = [st.params for st in states]
        temps = np.fromiter((p.temperature for p in params), dtype=np.float32, count=len(params))
        top_ks = np.fromiter((min(p.top_k, self.vocab_size) if p.top_k > 0 else self.vocab_size
                              for p in params), dtype=np.int64, count=len(params))
        top_ps = np.fromiter((p.top_p for p in params), dtype=np.float32, count=len(params))
        (ids_d, pos_d, cu_d, ctx_d, tables_d, slots_d, idx_d, pend_d, src_d, temps_d, ks_d,
         ps_d, *moving_d) = self.stager.stage(
            ids, pos, cu, np.asarray(ctx, dtype=np.int32), tables, slots, logits_idx,
            pending.astype(np.int64), src, temps, top_ks, top_ps, *moving)
        if pending.size == ids.size and np.array_equal(src, np.arange(src.size)):
            ids_d = self._last_tokens[:src.size]  # the common decode step: no gather kernels
        elif pending.size:
            ids_d.index_copy_(0, pend_d, self._last_tokens.index_select(0, src_d))
        shift = None
        if moving_d:
            shift, pos_d, ctx_d, slots_d = self._move(tables_d, pos_d, ctx_d, *moving_d)
        # a moved row's context is bounded by the most it may be (all its drafts kept)
        most = [c + r.unverified for c, r in zip(ctx, reqs)]
        meta = AttentionMetadata(
            cu_seqlens_q=cu_d, context_lens=ctx_d, block_tables=tables_d, slot_mapping=slots_d,
            max_q_len=max(q_lens), max_context_len=max(most), is_decode=max(q_lens) == 1,
            q_lens_cpu=q_lens, context_lens_cpu=None if moved else ctx,
            num_decode_seqs=leading_decodes(q_lens))
        histories = [reqs[i].history for i in rows]
        if counts is not None:
            histories = [h for h, m in zip(histories, counts) for _ in range(m)]
        sampling = self._sampling_batch(states, histories, temps_d, ks_d, ps_d)
        return StepInputs(ids_d, pos_d, meta, rows, counts, idx_d, sampling, shift)

    def _move(self, tables: torch.Tensor, pos: torch.Tensor, ctx: torch.Tensor,
              moved: torch.Tensor, seq_of_tok: torch.Tensor, src: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per row the shift, positions, context lengths, slots) once the moved rows stand
        where the previous step's verdict put them: their host start assumed none of its
        drafts kept, the device adds how many were (the slots of a row that moved by none
        come out as the host's)."""
        assert self._last_accepted is not None, "moved rows follow a drafting step"
        shift = torch.zeros(ctx.shape[0], dtype=torch.int64, device=ctx.device).index_copy_(
            0, moved, self._last_accepted.index_select(0, src))
        pos = pos + shift.index_select(0, seq_of_tok)
        bs = self.block_size
        slots = tables.to(torch.int64)[seq_of_tok, pos // bs] * bs + pos % bs
        return shift, pos, ctx + shift.to(ctx.dtype), slots

    @staticmethod
    def _scan(reqs: list[ScheduledRequest]
              ) -> tuple[list[int], list[int], Optional[list[int]], np.ndarray]:
        """One pass over the batch: each request's start, the rows that sample and how many
        positions each (None when every one samples one), and the block tables padded with -1
        (filled row by row: 2.6x faster than one fancy-indexed scatter at 256 sequences)."""
        starts, rows, counts, width = [], [], [], 0
        for i, r in enumerate(reqs):
            starts.append(r.start)
            if r.num_sampled:
                rows.append(i)
                counts.append(r.num_sampled)
            width = max(width, len(r.block_table))
        tables = np.full((len(reqs), width), -1, dtype=np.int32)
        for i, r in enumerate(reqs):
            tables[i, :len(r.block_table)] = r.block_table
        return starts, rows, (counts if any(m > 1 for m in counts) else None), tables

    def _pending_sources(self, reqs: list[ScheduledRequest], seq_rows: np.ndarray,
                         offsets: np.ndarray) -> np.ndarray:
        """Where each pending token (the offsets-th of its row's) sits in _last_tokens."""
        try:
            rows = np.fromiter((self._last_row_of[reqs[r].request_id] for r in seq_rows),
                               dtype=np.int64, count=seq_rows.size)
        except KeyError:
            raise RuntimeError("a pending token does not come from the previous step: the engine "
                               "must resolve a step before scheduling twice past it") from None
        return rows + offsets.astype(np.int64) * self._last_stride

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                logits_idx: torch.Tensor) -> torch.Tensor:
        """Logits of the rows in logits_idx (token indices, on the device)."""
        if self.drafter is not None:  # its graphs return hidden states
            hidden = self._forward_drafting(input_ids, positions, meta)[0]
            return self.model.compute_logits(hidden.index_select(0, logits_idx))
        n = input_ids.shape[0]
        graphs = self._graphs_for(meta, n)
        if graphs is not None:
            (logits,) = graphs.replay(input_ids, positions, meta)
            if logits_idx.shape[0] == n:  # every token samples, in order
                return logits
            return logits.index_select(0, logits_idx)
        with self.slot.using(ForwardContext(meta, self.kv.caches, self.kv.scales)):
            hidden = self.forward_fn(input_ids, positions)
        return self.model.compute_logits(hidden.index_select(0, logits_idx))

    def _graphs_for(self, meta: AttentionMetadata, n_tokens: int) -> Optional[StepGraphs]:
        return first_fitting((self.graphs, *self.verify_graphs), meta, n_tokens)

    def _forward_drafting(self, input_ids: torch.Tensor, positions: torch.Tensor,
                          meta: AttentionMetadata) -> tuple[torch.Tensor, ...]:
        """The target's final hidden state at every token, then what the drafter reads besides
        (drafter.target_forward), replayed where a graph fits."""
        assert self._drafting_forward is not None
        graphs = self._graphs_for(meta, input_ids.shape[0])
        if graphs is not None:
            return graphs.replay(input_ids, positions, meta)
        with self.slot.using(ForwardContext(meta, self.kv.caches, self.kv.scales)):
            return self._drafting_forward(input_ids, positions)

    def _sampling_batch(self, states: list[RunnerRequest], histories: list[Optional[list[int]]],
                        temps: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor
                        ) -> SamplingBatch:
        """One entry per sampled position (a request verifying drafts has several)."""
        params = [st.params for st in states]
        gens = []
        for st in states:
            p = st.params
            if p.seed is not None and p.temperature > 0 and st.generator is None:
                st.generator = torch.Generator(device=self.device).manual_seed(p.seed)
            gens.append(st.generator if p.seed is not None else None)
        penalties = (self._penalties(states, histories)
                     if any(p.uses_penalties for p in params) else None)
        return SamplingBatch(
            temperatures=temps,
            top_ks=top_ks if any(0 < p.top_k < self.vocab_size for p in params) else None,
            top_ps=top_ps if any(p.top_p < 1.0 for p in params) else None,
            generators=gens, all_greedy=all(p.temperature == 0 for p in params),
            penalties=penalties,
            max_logprobs=max((p.logprobs for p in params if p.logprobs is not None), default=-1))

    def _penalties(self, states: list[RunnerRequest],
                   histories: list[Optional[list[int]]]) -> PenaltyBatch:
        """Built from the host token lists the scheduler sends with penalized requests (it
        resolves every step before one that needs them: see EngineCore.step)."""
        dev, vocab = self.device, self.vocab_size
        counts = torch.zeros(len(states), vocab, device=dev)
        seen = torch.zeros(len(states), vocab, dtype=torch.bool, device=dev)
        for r, (st, hist) in enumerate(zip(states, histories)):
            if hist is None:
                continue
            out = torch.tensor(hist[st.num_prompt_tokens:], dtype=torch.long, device=dev)
            if out.numel():
                counts[r] = torch.bincount(out, minlength=vocab)[:vocab].float()
            seen[r, torch.tensor(hist, dtype=torch.long, device=dev)] = True
        f = lambda attr: torch.tensor([getattr(st.params, attr) for st in states], device=dev)
        return PenaltyBatch(counts, seen, f("presence_penalty"), f("frequency_penalty"),
                            f("repetition_penalty"))

    def launch(self, out: SchedulerOutput) -> LaunchedStep:
        """Queue one step (inputs, forward, sampling) on the device without waiting for it."""
        step = self._launch_batch(out)
        if self.drafter is None:  # a drafting step remembers its own (_remember_drafted)
            self._remember(out, step)
        return step

    def _launch_batch(self, out: SchedulerOutput) -> LaunchedStep:
        inputs = self.prepare(out)
        with annotate(self.profiler.active, inputs.meta.q_lens_cpu or [],
                      inputs.meta.context_lens_cpu or []):
            return self._launch(out, inputs)

    def _remember(self, out: SchedulerOutput, step: LaunchedStep) -> None:
        """The step's sampled tokens: where the next step reads its pending tokens from."""
        self._last_tokens = step.tokens
        self._last_row_of = ({} if step.counts is not None else
                             {out.requests[row].request_id: r for r, row in enumerate(step.rows)})
        self._last_stride, self._last_accepted = len(step.rows), None

    def _remember_drafted(self, out: SchedulerOutput, rows: list[int],
                          verdict: Optional[Verdict], drafted: Drafted) -> None:
        """A drafting step's kept counts, last kept tokens and drafts: what the next step,
        queued before this one resolves, reads its pending tokens and moves from."""
        if verdict is None or drafted.columns is None:
            self._last_tokens, self._last_row_of, self._last_accepted = None, {}, None
            return
        self._last_tokens = torch.cat([verdict.last, drafted.columns.reshape(-1)])
        self._last_row_of = {out.requests[row].request_id: r for r, row in enumerate(rows)}
        self._last_stride, self._last_accepted = len(rows), verdict.accepted

    def _launch(self, out: SchedulerOutput, inputs: StepInputs) -> LaunchedStep:
        if self.drafter is not None:
            return self._launch_drafting(out, inputs)
        if not inputs.rows:
            first = torch.zeros(1, dtype=torch.long, device=self.device)
            self.forward(inputs.input_ids, inputs.positions, inputs.meta, first)
            return LaunchedStep([], None)
        logits = self.forward(inputs.input_ids, inputs.positions, inputs.meta, inputs.logits_idx)
        return self._step(out, inputs, logits, self._sample(out, inputs, logits))

    @torch.inference_mode()
    def _launch_drafting(self, out: SchedulerOutput, inputs: StepInputs) -> LaunchedStep:
        """A step with a runner-side drafter: the target's hidden states stay for the draft
        layer, whose drafting is queued right behind the step's sampling; what it needs of
        the kept tokens is decided on the device (spec_decode/verdict.py), so nothing waits
        for them here (spec_decode/drafter.py)."""
        assert self.drafter is not None
        hidden, *extras = self._forward_drafting(inputs.input_ids, inputs.positions, inputs.meta)
        counts = inputs.counts or [1] * len(inputs.rows)
        verdict: Optional[Verdict] = None
        step = LaunchedStep([], None)
        if inputs.rows:
            logits = self.model.compute_logits(hidden.index_select(0, inputs.logits_idx))
            tokens = self._sample(out, inputs, logits)
            verdict = self._judge(inputs, counts, tokens)
            step = self._step(out, inputs, logits, tokens, verdict)
        states = [self._requests[out.requests[row].request_id] for row in inputs.rows]
        draft_step = DraftStep(inputs.input_ids, inputs.positions, inputs.meta, hidden,
                               inputs.rows, counts, [st.params for st in states],
                               [st.generator for st in states], tuple(extras), inputs.shift)
        drafted = self.drafter.propose(out.requests, draft_step, verdict)
        step.read_proposals = drafted.read
        self._remember_drafted(out, inputs.rows, verdict, drafted)
        return step

    def _judge(self, inputs: StepInputs, counts: list[int], tokens: torch.Tensor) -> Verdict:
        """The drafts each row keeps, decided on the device: exact match over the samples, or
        the forced schedule's counts, drawn now (the step's only draws of it)."""
        return judge(tokens, counts, inputs.input_ids, inputs.logits_idx,
                     forced_counts(self.verify, [m - 1 for m in counts]), self.stager)

    def _sample(self, out: SchedulerOutput, inputs: StepInputs, logits: torch.Tensor
                ) -> torch.Tensor:
        """Every sampled position's token; rows whose drafts came with a q are then resampled
        by the rejection rule (spec_decode/rejection.py)."""
        sb = inputs.sampling
        tokens = sample(logits, sb)
        if self.drafter is not None and inputs.counts is not None:
            gens = [self._requests[out.requests[row].request_id].generator for row in inputs.rows]
            drafted = self.drafter.drafted_rows(out.requests, inputs.rows, inputs.counts, gens)
            if drafted is not None:
                resample_drafted(logits, tokens, sb, drafted, self.stager)
        return tokens

    @staticmethod
    def _drafts(out: SchedulerOutput, inputs: StepInputs) -> dict[int, list[int]]:
        """Per verifying row, the drafts its positions check."""
        if inputs.counts is None:
            return {}
        return {row: out.requests[row].token_ids[-(m - 1):]
                for row, m in zip(inputs.rows, inputs.counts) if m > 1}

    def _step(self, out: SchedulerOutput, inputs: StepInputs, logits: torch.Tensor,
              tokens: torch.Tensor, verdict: Optional[Verdict] = None) -> LaunchedStep:
        """The launched step over its sampled tokens (and their logprobs when asked);
        verdict: what each row keeps, when the device decided it (a drafting step)."""
        sb = inputs.sampling
        drafts = self._drafts(out, inputs) if verdict is None else None
        accepted, checked = (None, None) if verdict is None else (verdict.accepted,
                                                                  verdict.drafts)
        if sb.max_logprobs < 0:
            return LaunchedStep(inputs.rows, tokens, counts=inputs.counts, drafts=drafts,
                                verify=self.verify, accepted=accepted, checked=checked)
        chosen, top = compute_logprobs(logits, tokens, sb.max_logprobs)
        ks = [self._requests[out.requests[row].request_id].params.logprobs for row in inputs.rows]
        return LaunchedStep(inputs.rows, tokens, ks, chosen,
                            None if top is None else (top.values, top.indices),
                            counts=inputs.counts, drafts=drafts, verify=self.verify,
                            accepted=accepted, checked=checked)


def _sampled_positions(cu: np.ndarray, rows: list[int], counts: Optional[list[int]]) -> np.ndarray:
    """Token index of every sampled position: each sampling row's last `count` tokens."""
    ends = cu[1:][rows].astype(np.int64)
    if counts is None:
        return ends - 1
    m = np.asarray(counts, dtype=np.int64)
    return np.repeat(ends - m, m) + (np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m))
