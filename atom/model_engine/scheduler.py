"""Continuous batching with chunked prefill and recompute preemption.

Every step has a token budget (`max_num_batched_tokens`). Running sequences go first (a decode
costs one token, an unfinished prefill continues with the next chunk); waiting ones are admitted
with what is left, and only while the cache keeps room for the running sequences' expected growth
(`reserve_ratio`): a preempted sequence is recomputed from its first token, so admitting more than
will fit costs throughput. When a running sequence still needs a block and none is free, the most
recently admitted running sequence is preempted: its blocks are freed and it is recomputed later.

Under DP attention every rank has its own KV pool: a sequence is pinned to the rank with the
most free blocks when it is admitted, and its blocks, prefix lookups, reservations and the
victims of its preemptions all come from that rank's pool; the token budget stays one for the
step, since every rank's rows meet in the same MLP steps.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from atom.config.schema import KVCacheConfig, SchedulerConfig
from atom.model_engine.block_manager import BlockManager
from atom.model_engine.sequence import Sequence, SequenceStatus
from atom.runner.scheduler_output import (PENDING_TOKEN, NewRequest, ScheduledRequest,
                                          SchedulerOutput)


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)  # tokens each sequence computes now
    drafts: dict[int, list[int]] = field(default_factory=dict)  # batch index → drafts it verifies

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def total_tokens(self) -> int:
        return sum(self.num_new_tokens)

    def output(self, finished_ids: list[str]) -> SchedulerOutput:
        """The batch as the executor sees it: no live Sequence crosses (scheduler_output.py)."""
        new, reqs = [], []
        for i, (seq, n) in enumerate(zip(self.seqs, self.num_new_tokens)):
            if not seq.announced:
                new.append(NewRequest(seq.request_id, seq.params, seq.num_prompt_tokens))
                seq.announced = True
            start, tokens = seq.num_computed_tokens, seq.token_ids
            drafts = self.drafts.get(i)
            if drafts:
                ids, sampled = tokens[start:] + drafts, 1 + len(drafts)
            else:
                ids, sampled = tokens[start:start + n], int(start + n == len(tokens))
            reqs.append(ScheduledRequest(seq.request_id, start, ids, seq.block_table, sampled,
                                         tokens if seq.params.uses_penalties else None,
                                         None if sampled else tokens[start + n], seq.rank,
                                         seq.num_unverified))
        return SchedulerOutput(new, reqs, finished_ids)


_RESERVE_CAP_TOKENS = 4096  # an EOS-ended request's reservation counts at most this many outputs


class Scheduler:
    def __init__(self, sched: SchedulerConfig, kv: KVCacheConfig, num_blocks: int,
                 eos_token_ids: set[int], max_model_len: int, lookahead: int = 0,
                 num_pools: int = 1) -> None:
        """`lookahead`: KV slots a runner-side drafter writes past a step's tokens
        (`spec_decode.proposer.draft_lookahead`), taken from free blocks only; `num_pools`:
        the ranks with a KV pool of their own (DP attention), `num_blocks` in each."""
        self.max_tokens = sched.max_num_batched_tokens
        self.max_seqs = sched.max_num_seqs
        self.delay_factor = sched.delay_factor
        self.reserve_ratio = sched.reserve_ratio
        self.max_model_len = max_model_len
        self.lookahead = lookahead
        self.eos = eos_token_ids
        self.pools = [BlockManager(num_blocks, kv.block_size, kv.enable_prefix_caching)
                      for _ in range(num_pools)]
        self.block_size = kv.block_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preempted = 0
        self._last_prompt_time = 0.0
        self._last_prompt_latency = 0.0

    # -- queue ----------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.stop_len = min(seq.stop_len, self.max_model_len)
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, request_ids: set[str]) -> list[Sequence]:
        """Finish these now and free their blocks (before the next step is scheduled)."""
        gone = [s for s in list(self.running) + list(self.waiting) if s.request_id in request_ids]
        for s in gone:
            self._finish(s, "abort")
        return gone

    def fail(self, seq: Sequence) -> None:
        """Finish a sequence the engine could not run (its step raised); frees its blocks."""
        self._finish(seq, "error")

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.pools[seq.rank].free_seq(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pools[seq.rank].free_seq(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_computed_tokens = 0
        seq.num_cached_tokens = 0
        seq.num_unverified, seq.spec_token_ids = 0, []
        seq.num_preemptions += 1
        self.num_preempted += 1
        self.waiting.appendleft(seq)

    # -- one step -------------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_tokens
        preempted = self._schedule_running(batch, budget)
        budget -= batch.total_tokens
        if not preempted and self._may_admit():
            self._admit_waiting(batch, budget)
        return batch

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> bool:
        preempted = False
        i = 0
        room = self.block_size
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            pool = self.pools[seq.rank]
            tokens = seq.token_ids
            if tokens[-1] == PENDING_TOKEN and not self._may_schedule_pending(seq):
                i += 1
                continue
            n = min(len(tokens) - seq.num_computed_tokens, budget)
            drafts = self._take_drafts(seq, n, budget)
            n += len(drafts)
            # its unverified drafts' KV may all be kept: room for them too
            need = seq.num_computed_tokens + seq.num_unverified + n
            if self.lookahead:  # the drafter's slots, only from free blocks: never preempts
                pool.try_allocate(seq, min(need + self.lookahead, self.max_model_len))
            while need > len(seq.block_table) * room and not pool.try_allocate(seq, need):
                victim = next(s for s in reversed(self.running) if s.rank == seq.rank)
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status != SequenceStatus.RUNNING:
                break
            if drafts:
                batch.drafts[len(batch.seqs)] = drafts
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
            i += 1
        return preempted

    @staticmethod
    def _may_schedule_pending(seq: Sequence) -> bool:
        """Whether a sequence whose last step is still in flight is scheduled now, or once
        that step resolves: not when its pending token is its last (it finishes then), nor
        when that step verified drafts (how many it keeps moves this step's positions) unless
        its drafter's drafts wait on the device (PENDING_TOKEN drafts, the engine's) and fit
        whatever it keeps: then the cut to its length limit is the one it would get after
        the resolve, so the schedule is the same."""
        tokens, drafts = seq.token_ids, seq.spec_token_ids
        if len(tokens) >= seq.stop_len:
            return False
        if drafts[:1] != [PENDING_TOKEN]:
            return not seq.num_unverified
        return seq.stop_len - (len(tokens) + seq.num_unverified) - 1 >= len(drafts)

    def _take_drafts(self, seq: Sequence, n: int, budget: int) -> list[int]:
        """The drafts a decoding sequence verifies this step: those its proposer left (on the
        host, or PENDING_TOKEN ones on the device after a pending token), cut to what the
        step's budget and the sequence's length limit hold (the one token after the last kept
        draft must still fit, whatever its unverified drafts leave)."""
        drafts, seq.spec_token_ids = seq.spec_token_ids, []
        on_device = drafts[:1] == [PENDING_TOKEN]
        if not drafts or n != 1 or (seq.token_ids[-1] == PENDING_TOKEN) != on_device:
            return []
        room = min(budget - 1, seq.stop_len - len(seq.token_ids) - seq.num_unverified - 1)
        return drafts[:max(0, room)]

    def _may_admit(self) -> bool:
        """The delay factor holds new prompts back briefly so they batch together."""
        if not self.waiting or self.delay_factor <= 0 or not self.running:
            return bool(self.waiting)
        waited = time.perf_counter() - self.waiting[0].arrival_time
        return waited > self.delay_factor * self._last_prompt_latency

    def _expected_blocks(self, seq: Sequence) -> int:
        """Blocks the sequence is expected to hold when it finishes: its whole prompt, then all of
        its remaining outputs when it ignores EOS, else reserve_ratio of them (capped)."""
        left = seq.stop_len - seq.num_tokens
        if not seq.params.ignore_eos:
            left = int(min(left, _RESERVE_CAP_TOKENS) * self.reserve_ratio)
        return -(-(seq.num_tokens + left) // self.block_size)

    def _reserved_blocks(self) -> list[int]:
        """Free blocks of each pool the running sequences are expected to take before they
        finish."""
        reserved = [0] * len(self.pools)
        for s in self.running:
            reserved[s.rank] += max(0, self._expected_blocks(s) - len(s.block_table))
        return reserved

    def _emptiest_rank(self) -> int:
        if len(self.pools) == 1:
            return 0
        return max(range(len(self.pools)), key=lambda r: self.pools[r].num_free_blocks)

    def _admit_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        admitted = False
        reserve = self.reserve_ratio > 0
        reserved = self._reserved_blocks() if reserve else [0] * len(self.pools)
        busy = {s.rank for s in self.running}  # pools whose growth the reservation protects
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            if not seq.block_table:
                seq.rank = self._emptiest_rank()
            pool = self.pools[seq.rank]
            pool.match_prefix(seq)
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            future = max(0, self._expected_blocks(seq) - len(seq.block_table)) if reserve else 0
            # The first sequence into an empty pool is admitted whatever it may grow to.
            if (not pool.can_allocate(seq, seq.num_computed_tokens + n)
                    or (seq.rank in busy and pool.num_free_blocks - reserved[seq.rank] < future)):
                if not self.running and not batch.seqs and seq.block_table == []:
                    raise RuntimeError(f"KV cache too small for one chunk of {n} tokens "
                                       f"({pool.num_free_blocks} free blocks)")
                pool.free_seq(seq)
                seq.num_computed_tokens = seq.num_cached_tokens = 0
                break
            self.waiting.popleft()
            pool.record_admission(seq)
            held = len(seq.block_table)
            pool.allocate(seq, seq.num_computed_tokens + n)
            reserved[seq.rank] += max(0, future - (len(seq.block_table) - held))
            if self.lookahead and seq.num_computed_tokens + n == seq.num_tokens:
                # the prompt's last chunk: its first drafts' slots, only from free blocks
                pool.try_allocate(seq, min(seq.num_tokens + self.lookahead, self.max_model_len))
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            busy.add(seq.rank)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
            admitted = True
        if admitted:
            now = time.perf_counter()
            self._last_prompt_latency = now - self._last_prompt_time if self._last_prompt_time else 0.0
            self._last_prompt_time = now

    # -- after the launch, and after the result ------------------------------------------------
    def advance(self, batch: ScheduledBatch, sampling_rows: list[int]) -> None:
        """Right after a step is queued: its tokens count as computed but for the drafts it
        verifies (unverified until `resolve` says how many stand), and each sampling row gets
        a PENDING_TOKEN until `resolve` reads the real one, so the next step can be scheduled
        (and its input read on the device) while this one still runs. Drafts left for it
        before (the step before's, resolved after this one was queued) are the ones it
        verifies."""
        rows = set(sampling_rows)
        for i, seq in enumerate(batch.seqs):
            if seq.status != SequenceStatus.RUNNING:
                continue
            seq.num_unverified = len(batch.drafts.get(i, ()))
            seq.num_computed_tokens += batch.num_new_tokens[i] - seq.num_unverified
            seq.spec_token_ids = []
            if i in rows:
                seq.token_ids.append(PENDING_TOKEN)
            if i not in batch.drafts:  # a verify step's blocks are committed once it resolves
                self.pools[seq.rank].commit_full_blocks(seq)

    def resolve(self, batch: ScheduledBatch,
                 sampled: dict[int, list[int]]) -> list[tuple[int, Sequence]]:
        """When a step's tokens are on the host: replace each pending token with the first kept
        token and append the rest (accepted drafts and the token after them), stopping at the
        first that ends the sequence; a verify step's accepted drafts join the KV cache's
        valid length, its rejected ones never did. Returns (batch index, sequence) of those
        that got a token."""
        touched = []
        for i, tokens in sampled.items():
            seq = batch.seqs[i]
            if seq.status is SequenceStatus.FINISHED:
                continue  # aborted, or stopped a step earlier: this extra token is dropped
            assert seq.token_ids[-1] == PENDING_TOKEN, seq
            seq.token_ids[-1] = tokens[0]
            reason = self._stop_reason(seq, tokens[0])
            for tok in tokens[1:]:
                if reason is not None:
                    break
                seq.token_ids.append(tok)
                reason = self._stop_reason(seq, tok)
            if batch.drafts.get(i) and seq.status is SequenceStatus.RUNNING:
                seq.num_computed_tokens += len(tokens) - 1
                self.pools[seq.rank].commit_full_blocks(seq)
            seq.num_unverified = 0
            if reason is not None:
                self._finish(seq, reason)
            touched.append((i, seq))
        return touched

    def _stop_reason(self, seq: Sequence, tok: int) -> Optional[str]:
        p = seq.params
        if not p.ignore_eos and tok in self.eos:
            return "stop"
        if p.stop_token_ids and tok in p.stop_token_ids:
            return "stop"
        if len(seq.token_ids) >= seq.stop_len:
            return "length"
        return None
