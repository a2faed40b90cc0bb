"""EngineCore: requests in, one step at a time, token outputs out. No text, no HTTP.

The same object runs inside LLMEngine (in-process) and inside the server's core process.
"""
from __future__ import annotations

import logging
import time
from typing import Optional

from atom.config.schema import SchedulerConfig
from atom.model_engine.executor_protocol import Executor, LaunchedStepProtocol
from atom.model_engine.messages import EngineRequest, EngineStats, StepOutput
from atom.model_engine.scheduler import ScheduledBatch, Scheduler
from atom.model_engine.sequence import Sequence, SequenceStatus
from atom.runner.scheduler_output import PENDING_TOKEN, SchedulerOutput
from atom.spec_decode.proposer import Proposer
from atom.spec_decode.stats import SpecDecodeRecorder

log = logging.getLogger("atom.engine")


def async_scheduling_enabled(sched: SchedulerConfig, device_type: str) -> bool:
    """`scheduler.async_scheduling`: None (auto) overlaps on a GPU only; on CPU the "device" is
    the host itself, so there is nothing to overlap and the extra step of a stopped sequence
    would be pure waste."""
    flag = sched.async_scheduling
    return device_type == "cuda" if flag is None else bool(flag)


class RequestRejected(ValueError):
    """A request the engine cannot run (e.g. a prompt longer than max_model_len)."""


class EngineCore:
    """Scheduling and request bookkeeping over an executor that runs the steps, a scheduler
    sized for it and the proposer of speculative decoding (all built and handed in by the
    builder). `log_interval_s`: seconds between throughput log lines, None for none."""

    def __init__(self, executor: Executor, scheduler: Scheduler, proposer: Optional[Proposer],
                 async_scheduling: bool, log_interval_s: Optional[float]) -> None:
        self.executor = executor
        self.max_model_len = executor.max_model_len
        self.scheduler = scheduler
        self.seqs: dict[str, Sequence] = {}
        self._penalized: set[str] = set()  # live requests whose sampling reads host token lists
        self._pending: list[StepOutput] = []
        self._gone: list[str] = []  # requests the executor may forget, told with the next step
        self._told: Optional[SchedulerOutput] = None  # what the last launch told the runner
        self.async_scheduling = async_scheduling
        self._inflight: Optional[tuple[ScheduledBatch, LaunchedStepProtocol]] = None
        self._stats = EngineStats(kv_blocks_total=executor.num_blocks * len(scheduler.pools))
        self._last_log = time.perf_counter()
        self._tokens_since_log = 0
        self.log_interval_s = log_interval_s
        self.proposer = proposer
        self._spec = (SpecDecodeRecorder(self._stats, self.proposer.k)
                      if self.proposer is not None else None)

    # -- requests -------------------------------------------------------------------------------
    def add_request(self, request: EngineRequest) -> None:
        n = len(request.prompt_token_ids)
        if n == 0:
            raise RequestRejected("the prompt is empty")
        if n >= self.max_model_len:
            raise RequestRejected(f"the prompt has {n} tokens; this model's max_model_len is "
                                  f"{self.max_model_len}")
        pool = self.scheduler.pools[0]  # a sequence's blocks all come from one rank's pool
        blocks = -(-(n + 1) // pool.block_size)
        if blocks > pool.num_blocks:
            raise RequestRejected(f"the prompt has {n} tokens and needs {blocks} KV blocks; the "
                                  f"cache has {pool.num_blocks}")
        if request.request_id in self.seqs:
            raise RequestRejected(f"request id {request.request_id!r} is already running")
        vocab = self.executor.vocab_size
        if any(not 0 <= t < vocab for t in request.prompt_token_ids):
            # An id past the embedding is a device-side assert on a GPU: fatal to every request.
            bad = next(t for t in request.prompt_token_ids if not 0 <= t < vocab)
            raise RequestRejected(f"prompt token id {bad} is outside this model's vocabulary "
                                  f"[0, {vocab})")
        seq = Sequence(request.request_id, request.prompt_token_ids, request.sampling_params,
                       request.arrival_time or time.perf_counter())
        self.seqs[seq.request_id] = seq
        if seq.params.uses_penalties:
            self._penalized.add(seq.request_id)
        self.scheduler.add(seq)
        self._stats.prompt_tokens_total += n

    def abort_requests(self, request_ids: list[str]) -> None:
        for seq in self.scheduler.abort(set(request_ids)):
            self._forget(seq)
            self._pending.append(StepOutput(request_id=seq.request_id, new_token_ids=[],
                                            finished=True, finish_reason="abort",
                                            num_prompt_tokens=seq.num_prompt_tokens))

    def has_unfinished(self) -> bool:
        return (self.scheduler.has_unfinished() or bool(self._pending)
                or self._inflight is not None)

    # -- one step ---------------------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        """Schedule and queue a step, then report the previous one. With async scheduling the
        device runs step N while the host reads step N-1's tokens and builds step N+1 (after a
        runner-side drafter's verify step too, on the drafts it left on the device); without
        it (or where _may_overlap says not) each step is resolved at once."""
        outputs, self._pending = self._pending, []
        if self._inflight is not None:
            if not self._may_overlap():
                outputs += self._resolve()
            elif self.proposer is not None:
                self._draft_on_device()
        batch = self.scheduler.schedule()
        launched, failure = None, None
        if batch.seqs:
            try:
                launched = self._launch(batch)
            except Exception as exc:
                self._raise_if_device_lost(exc)
                failure = exc
        if self._inflight is not None:
            outputs += self._resolve()
        if launched is not None:
            late = launched.launch_failure()  # ranks in other processes: known by now
            if late is not None:
                self._retell()
                launched, failure = None, late
        if failure is not None:
            outputs += self._isolate(batch, failure)
        if launched is not None:
            self.scheduler.advance(batch, launched.rows)
            self._inflight = (batch, launched)
            if not self.async_scheduling:
                outputs += self._resolve()
            self._stats.num_steps += 1
        self._maybe_log()
        return outputs

    # -- a step that raises ------------------------------------------------------------------
    def _isolate(self, batch: ScheduledBatch, failure: Exception) -> list[StepOutput]:
        """A step raised before it ran: run its sequences again in halves, each half resolved at
        once, until every failure is pinned on one sequence, which alone is failed. One bad
        request costs about 2·log2(batch) extra steps; the rest of the batch gets its tokens
        from these smaller steps. Called with no step in flight, so no token is pending."""
        log.warning("engine step of %d sequences raised %s: %s; isolating the request behind it",
                    len(batch.seqs), type(failure).__name__, failure)
        outputs: list[StepOutput] = []
        parts = [[self._on_host(s, n, batch.drafts.get(i)) for i, (s, n) in
                  enumerate(zip(batch.seqs, batch.num_new_tokens))]]
        while parts:
            part = [(s, n, d) for s, n, d in parts.pop() if s.status is SequenceStatus.RUNNING]
            if not part:
                continue
            sub = ScheduledBatch([s for s, _, _ in part], [n for _, n, _ in part],
                                 {j: d for j, (_, _, d) in enumerate(part) if d})
            try:
                launched = self._launch(sub)
                late = launched.launch_failure()
                if late is not None:
                    self._retell()
                    raise late
            except Exception as exc:
                self._raise_if_device_lost(exc)
                if len(part) == 1:
                    outputs.append(self._fail(part[0][0], exc))
                else:
                    mid = len(part) // 2
                    parts += [part[mid:], part[:mid]]
                continue
            self.scheduler.advance(sub, launched.rows)
            self._inflight = (sub, launched)
            outputs += self._resolve()
        return outputs

    @staticmethod
    def _on_host(seq: Sequence, n: int, drafts: Optional[list[int]]
                 ) -> tuple[Sequence, int, Optional[list[int]]]:
        """A sequence of a step that raised, as a step of its own runs it: drafts it took on
        the device (the step before's, which has resolved since) are those the host read then
        (each half's launch replaces what the runner kept of the step before)."""
        if not drafts or drafts[0] != PENDING_TOKEN:
            return seq, n, drafts
        host, seq.spec_token_ids = seq.spec_token_ids[:len(drafts)], []
        return seq, n - len(drafts) + len(host), host

    def _fail(self, seq: Sequence, exc: Exception) -> StepOutput:
        log.error("request %s failed in the engine: %s: %s", seq.request_id, type(exc).__name__, exc)
        self.scheduler.fail(seq)
        self._forget(seq)
        return StepOutput(request_id=seq.request_id, new_token_ids=[], finished=True,
                          finish_reason="error", num_prompt_tokens=seq.num_prompt_tokens,
                          error=f"{type(exc).__name__}: {exc}")

    def _raise_if_device_lost(self, exc: Exception) -> None:
        """Only a fault that leaves the device unusable may end the core."""
        if not self.executor.device_usable():
            raise exc

    def _may_overlap(self) -> bool:
        """Whether the next step may be scheduled before the one in flight resolves: not when
        sampling reads host token lists (penalties), nor with a core-side proposer (n-gram
        reads each sequence's last token), nor after a step that drafted for a row at
        temperature > 0 (the rejection sampler reads the drafts and their q on the host:
        Drafter.drafted_rows). After a runner-side drafter's step the next one verifies the
        drafts it left on the device, at positions the device moves by the drafts each row
        kept (Scheduler._may_schedule_pending says which rows wait for the resolve)."""
        if not self.async_scheduling or self._penalized:
            return False
        if self.proposer is None or self._inflight is None:
            return True
        if not self.proposer.on_device:
            return False
        batch, launched = self._inflight
        return all(batch.seqs[i].params.temperature == 0 for i in launched.rows)

    def _draft_on_device(self) -> None:
        """The in-flight step's drafts stay on the device: each of its sampling rows still
        running verifies k of them next (PENDING_TOKEN drafts, cut as the scheduler cuts
        any), in place of the proposer's, which come when it resolves."""
        assert self._inflight is not None and self.proposer is not None
        batch, launched = self._inflight
        for i in launched.rows:
            seq = batch.seqs[i]
            if seq.status is SequenceStatus.RUNNING:
                seq.spec_token_ids = [PENDING_TOKEN] * self.proposer.k

    def _forget(self, seq: Sequence) -> None:
        if self.seqs.pop(seq.request_id, None) is not None and seq.announced:
            self._gone.append(seq.request_id)
        self._penalized.discard(seq.request_id)

    def _launch(self, batch: ScheduledBatch) -> LaunchedStepProtocol:
        gone, self._gone = self._gone, []
        out = self._told = batch.output(gone)
        try:
            return self.executor.execute(out)
        except Exception:
            self._retell()
            raise

    def _retell(self) -> None:
        """The last launch raised, maybe before the runner read it (other ranks: the step failed
        to encode or to decode), so what it told the runner (new requests, finished ones) is told
        again with the next step; telling a runner twice changes nothing."""
        assert self._told is not None
        for new in self._told.new_requests:
            seq = self.seqs.get(new.request_id)
            if seq is not None:
                seq.announced = False
        self._gone = self._told.finished_ids + self._gone

    def _resolve(self) -> list[StepOutput]:
        assert self._inflight is not None
        (batch, launched), self._inflight = self._inflight, None
        sampled, logprobs = launched.result()
        drafted = launched.proposals if self._spec is not None else {}
        outputs = []
        for i, seq in self.scheduler.resolve(batch, sampled):
            if self._spec is not None:
                self._speculate(seq, batch.drafts.get(i), len(sampled[i]) - 1, drafted.get(i))
            new = seq.token_ids[seq.num_prompt_tokens + seq.num_emitted:]
            seq.num_emitted += len(new)
            lp = logprobs.get(i) if logprobs else None
            finished = seq.status is SequenceStatus.FINISHED
            outputs.append(StepOutput(
                request_id=seq.request_id, new_token_ids=new, finished=finished,
                finish_reason=seq.finish_reason, num_prompt_tokens=seq.num_prompt_tokens,
                num_cached_tokens=seq.num_cached_tokens,
                logprobs=lp[:len(new)] if lp is not None else None))
            if finished:
                self._forget(seq)
            self._stats.generation_tokens_total += len(new)
            self._tokens_since_log += len(new)
        return outputs

    def _speculate(self, seq: Sequence, drafts: Optional[list[int]], accepted: int,
                   drafted: Optional[list[int]]) -> None:
        """Count what its verify step kept, and leave its next drafts on a decoding sequence
        (the proposer's, from its history or from what the runner drafted: `drafted`).
        Not for penalized requests: the runner's penalties at a verified position would not
        count the drafts before it."""
        assert self._spec is not None and self.proposer is not None
        if drafts:
            self._spec.record(len(drafts), accepted)
        if (seq.status is SequenceStatus.RUNNING and seq.request_id not in self._penalized
                and seq.num_computed_tokens == len(seq.token_ids) - 1):
            seq.spec_token_ids = self.proposer.propose(seq.token_ids, drafted)

    # -- observability --------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        s, pools = self._stats, self.scheduler.pools
        s.num_running, s.num_waiting = len(self.scheduler.running), len(self.scheduler.waiting)
        s.num_preempted_total = self.scheduler.num_preempted
        s.kv_blocks_free = sum(b.num_free_blocks for b in pools)
        s.prefix_cache_queries = sum(b.queries for b in pools)
        s.prefix_cache_hits = sum(b.hits for b in pools)
        return s

    def _maybe_log(self) -> None:
        now = time.perf_counter()
        if self.log_interval_s is None or now - self._last_log < self.log_interval_s:
            return
        s = self.stats()
        log.info("engine: %.1f tok/s generation, running %d, waiting %d, KV usage %.1f%%, "
                 "prefix-cache hit rate %.1f%%", self._tokens_since_log / (now - self._last_log),
                 s.num_running, s.num_waiting, 100 * s.kv_usage, 100 * s.prefix_hit_rate)
        self._last_log, self._tokens_since_log = now, 0

    def start_profile(self) -> None:
        self.executor.start_profile()

    def stop_profile(self) -> None:
        self.executor.stop_profile()

    def shutdown(self) -> None:
        self.executor.shutdown()
