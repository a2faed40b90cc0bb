"""The MTP drafter: the runner-side proposer that runs DeepSeek's next-n layer after each step.

After the target's forward and verification, the next-n layer (atom/models/deepseek_mtp.py)
runs over every token of the step at the target's positions and slots, so its KV cache layer
holds, at position i, what the target's hidden state at i and the token after it give:
- positions inside a chunk read the next input token, and a chunk's last position the prompt
  token after it (`ScheduledRequest.next_token`);
- a row's sampled positions read the tokens the row kept (its accepted drafts, then the token
  after them); positions past a rejection read the last kept token: their slots lie past the
  sequence's kept length and the next step, which starts there, writes them again before any
  query reads them.
From each sampling row's last kept position the layer gives the first draft; drafts 2..k run
the same layer one position at a time with its own output as the next hidden state (vLLM and
SGLang reuse R1's single layer the same way). Greedy rows (temperature 0) take the argmax; the
others sample from q (their own temperature, top-k and top-p on the layer's logits) with their
own generator, and q is kept for the rejection sampler at the step that verifies them.

The layer is run in the launch, after the step's tokens are read back: with a proposer the core
resolves every step before scheduling the next (engine_core._may_overlap), so this read costs
no overlap. Known approximations, which cost acceptance and never exactness: a prefix-cache hit
reuses the layer's KV of the shared blocks (each block's last position written with the token
that followed it in the sequence that computed it), and a draft position past the sequence's
blocks (the scheduler adds the k - 1 slots past a step's tokens only from free blocks) ends that
row's drafts early.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np
import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext
from atom.layers.sampler import probabilities
from atom.sampling_params import SamplingParams
from atom.spec_decode.rejection import DraftedRows


class ScheduledRequest(Protocol):
    """What the drafter reads of a request's share of the step (runner/scheduler_output.py's
    ScheduledRequest, which sits above this package)."""

    request_id: str
    start: int
    token_ids: list[int]
    block_table: list[int]
    next_token: Optional[int]


@dataclass
class DraftStep:
    """What the drafter reads of the step just launched (the runner's device tensors)."""

    input_ids: torch.Tensor  # [T], pending tokens already filled in
    positions: torch.Tensor  # [T]
    meta: AttentionMetadata
    hidden: torch.Tensor  # [T, H] the target's final hidden states
    rows: list[int]  # batch indices that sampled
    counts: list[int]  # sampled positions of each row
    params: list[SamplingParams]  # per row
    generators: list[Optional[torch.Generator]]  # per row (seeded requests at temperature > 0)


class MTPDrafter:
    def __init__(self, model: torch.nn.Module, k: int, block_size: int,
                 max_model_len: int) -> None:
        self.layer = model.mtp
        self.embed = model.model.embed_tokens
        self.slot = model.context.forward  # the target's: its layer is one of the model's
        self.k, self.block_size, self.max_model_len = k, block_size, max_model_len
        # request id → (the sampled drafts, their q [len, V]) until the step that verifies them
        self._q: dict[str, tuple[list[int], torch.Tensor]] = {}

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
    def propose(self, reqs: list[ScheduledRequest], step: DraftStep, kept: dict[int, list[int]],
                kv_caches: list, kv_scales: list) -> dict[int, list[int]]:
        """Write the layer's KV for the whole step and return each sampling row's drafts."""
        dev = step.input_ids.device
        ids, last_idx, last_pos = self._next_tokens(reqs, step, kept)
        y = self._run(step.positions, ids, step.hidden, step.meta, kv_caches, kv_scales)
        if not step.rows:
            return {}
        y = y.index_select(0, torch.tensor(last_idx, device=dev))
        live = list(range(len(step.rows)))
        tokens, probs = self._pick(self.layer.compute_logits(y), step, live)
        columns: list[tuple[list[int], torch.Tensor, Optional[torch.Tensor]]] = [
            (live, tokens, probs)]
        for depth in range(1, self.k):
            keep = [n for n, i in enumerate(live) if self._has_slot(reqs[step.rows[i]],
                                                                     last_pos[i] + depth)]
            if not keep:
                break
            sel = torch.tensor(keep, device=dev)
            live = [live[n] for n in keep]
            pos = [last_pos[i] + depth for i in live]
            tables = step.meta.block_tables.index_select(
                0, torch.tensor([step.rows[i] for i in live], device=dev))
            meta = self._decode_meta([reqs[step.rows[i]] for i in live], tables, pos,
                                     step.meta.split_counters)
            y = self._run(torch.tensor(pos, device=dev), tokens.index_select(0, sel),
                          y.index_select(0, sel), meta, kv_caches, kv_scales)
            tokens, probs = self._pick(self.layer.compute_logits(y), step, live)
            columns.append((live, tokens, probs))
        return self._collect(reqs, step, columns)

    @staticmethod
    def _next_tokens(reqs: list[ScheduledRequest], step: DraftStep, kept: dict[int, list[int]]
                     ) -> tuple[torch.Tensor, list[int], list[int]]:
        """(the token after each of the step's positions [T], each sampling row's last kept
        token index in the step, and its position): the next input inside a row, the kept
        tokens at its sampled positions (the last kept one past a rejection), the prompt's next
        token at the end of a chunk."""
        q_lens = step.meta.q_lens_cpu or []
        ends = np.cumsum(q_lens)
        fix_idx, fix_tok, last_idx, last_pos = [], [], [], []
        for row, m in zip(step.rows, step.counts):
            toks, end = kept[row], int(ends[row])
            a = len(toks) - 1
            for j in range(m):
                fix_idx.append(end - m + j)
                fix_tok.append(toks[min(j, a)])
            last_idx.append(end - m + a)
            last_pos.append(reqs[row].start + q_lens[row] - m + a)
        for row, req in enumerate(reqs):
            if req.next_token is not None:
                fix_idx.append(int(ends[row]) - 1)
                fix_tok.append(req.next_token)
        dev = step.input_ids.device
        ids = torch.roll(step.input_ids, -1)
        if fix_idx:
            ids[torch.tensor(fix_idx, device=dev)] = torch.tensor(fix_tok, device=dev)
        return ids, last_idx, last_pos

    def _run(self, positions: torch.Tensor, ids: torch.Tensor, hidden: torch.Tensor,
             meta: AttentionMetadata, kv_caches: list, kv_scales: list) -> torch.Tensor:
        with self.slot.using(ForwardContext(meta, kv_caches, kv_scales)):
            return self.layer.draft_hidden(positions, self.embed(ids), hidden)

    def _has_slot(self, req: ScheduledRequest, pos: int) -> bool:
        return pos < min(len(req.block_table) * self.block_size, self.max_model_len)

    def _decode_meta(self, reqs: list[ScheduledRequest], tables: torch.Tensor, pos: list[int],
                     split_counters: Optional[torch.Tensor]) -> AttentionMetadata:
        """One query per row at `pos`, attending to everything before it in the row's blocks."""
        dev, bs, n = tables.device, self.block_size, len(pos)
        slots = [r.block_table[p // bs] * bs + p % bs for r, p in zip(reqs, pos)]
        ctx = [p + 1 for p in pos]
        return AttentionMetadata(
            cu_seqlens_q=torch.arange(n + 1, dtype=torch.int32, device=dev),
            context_lens=torch.tensor(ctx, dtype=torch.int32, device=dev), block_tables=tables,
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev), max_q_len=1,
            max_context_len=max(ctx), is_decode=True, q_lens_cpu=[1] * n, context_lens_cpu=ctx,
            split_counters=split_counters)

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

    def _collect(self, reqs: list[ScheduledRequest], step: DraftStep,
                 columns: list[tuple[list[int], torch.Tensor, Optional[torch.Tensor]]]
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


def build_drafter(method: Optional[str], model: torch.nn.Module, k: int, block_size: int,
                  max_model_len: int) -> Optional[MTPDrafter]:
    """The runner-side drafter a method needs; None for core-side proposers (n-gram) and none."""
    return MTPDrafter(model, k, block_size, max_model_len) if method == "mtp" else None
