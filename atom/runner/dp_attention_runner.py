"""One rank's runner under DP attention: its own sequences' rows, padded to the step's largest
rank, and every rank's sampled tokens gathered back into the step's order.

Every rank gets the whole SchedulerOutput (one scheduler steps them all), and reads from it
what it needs of the others with no exchange: which requests are its own (ScheduledRequest.rank),
the most rows any rank runs (each rank pads to it, so the MLPs' gather over the ranks stacks
equal blocks: atom/layers/dp_attention.py), and where each rank's sampled tokens go. The pad
rows write their KV into a scratch block the scheduler never hands out. A step of decodes only
pads with one-token sequences, so every rank stays decode-shaped and replays a graph of the
same size (or none, on every rank alike); any other step pads with one sequence of the missing
tokens (one-token pads could then outnumber max_num_seqs), and no rank replays a graph, since
the ranks' forwards must meet at the same collectives with the same row counts.

The tokens come back with one all-gather (every rank's padded to the most sampling rows of
any rank) and an index in the step's order: rank 0 answers with them as in tensor parallelism,
and every rank reads its next step's pending tokens from the same tensor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.parallel_state import ParallelState
from atom.runner.cuda_graphs import StepGraphs
from atom.runner.launched_step import LaunchedStep
from atom.runner.model_runner import ModelRunner
from atom.runner.scheduler_output import ScheduledRequest, SchedulerOutput

# The request id of pad rows; never looked up: they sample nothing and hold no pending token.
PAD_REQUEST = ""


@dataclass
class RankBatch:
    out: SchedulerOutput  # this rank's requests in the step's order, then its pad rows
    # The step's sampling rows and, for each, where its token lies among the gathered
    # [tp * most] tokens: its rank's block, then its place among that rank's sampling rows.
    rows: list[int]
    index: np.ndarray
    most: int  # the most sampling rows of any rank
    eager: bool  # not all decodes: no rank replays a graph


def rank_batch(out: SchedulerOutput, rank: int, ranks: int, scratch_block: int,
               block_size: int) -> RankBatch:
    """This rank's share of the step, padded to the most tokens of any rank."""
    tokens, sampling = [0] * ranks, [0] * ranks
    mine: list[ScheduledRequest] = []
    rows, places = [], []
    for i, r in enumerate(out.requests):
        if r.num_sampled > 1:
            raise ValueError("DP attention verifies no drafts (validation refuses them)")
        tokens[r.rank] += len(r.token_ids)
        if r.num_sampled:
            rows.append(i)
            places.append((r.rank, sampling[r.rank]))
            sampling[r.rank] += 1
        if r.rank == rank:
            mine.append(r)
    most = max(sampling)
    index = np.fromiter((k * most + p for k, p in places), dtype=np.int64, count=len(places))
    decodes = all(len(r.token_ids) == 1 for r in out.requests)
    missing = max(tokens) - tokens[rank]
    if decodes:
        pads = [_pad(1, scratch_block, block_size, rank) for _ in range(missing)]
    else:
        pads = [_pad(missing, scratch_block, block_size, rank)] if missing else []
    local = SchedulerOutput(out.new_requests, mine + pads, out.finished_ids)
    return RankBatch(local, rows, index, most, eager=not decodes)


def _pad(n: int, scratch_block: int, block_size: int, rank: int) -> ScheduledRequest:
    """n pad tokens at positions [0, n): every one's KV slot is in the scratch block, which
    its block table repeats (attention over it reads finite values, and nothing reads back)."""
    return ScheduledRequest(PAD_REQUEST, 0, [0] * n, [scratch_block] * -(-n // block_size), 0,
                            rank=rank)


class DPAttentionRunner(ModelRunner):
    """ModelRunner over this rank's rows of each step (module doc); `ranks` are the MLPs'."""

    def __init__(self, *args: Any, ranks: ParallelState, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ranks = ranks
        # The pool's last block takes the pad rows' KV: the scheduler is told of the others.
        self.num_blocks -= 1
        if self.num_blocks < 1:
            raise ValueError("DP attention needs a KV pool of two blocks or more")
        self.scratch_block = self.num_blocks
        self._eager = False

    def launch(self, out: SchedulerOutput) -> LaunchedStep:
        batch = rank_batch(out, self.ranks.tp_rank, self.ranks.tp_size, self.scratch_block,
                           self.block_size)
        self._eager = batch.eager
        step = self._gathered(out, batch, self._launch_batch(batch.out))
        self._remember(out, step)
        return step

    def _graphs_for(self, meta: AttentionMetadata, n_tokens: int) -> Optional[StepGraphs]:
        return None if self._eager else super()._graphs_for(meta, n_tokens)

    def _gathered(self, out: SchedulerOutput, batch: RankBatch,
                  local: LaunchedStep) -> LaunchedStep:
        """The step's sampled tokens (and logprobs) from every rank, in the step's order."""
        if not batch.rows:
            return LaunchedStep([], None)
        (index,) = self.stager.stage(batch.index)
        tokens = self._gather(local.tokens, batch, index, (), torch.long)
        ks = [self._requests[out.requests[i].request_id].params.logprobs for i in batch.rows]
        k = max((k for k in ks if k is not None), default=-1)
        if k < 0:
            return LaunchedStep(batch.rows, tokens, verify=self.verify)
        chosen = self._gather(local.chosen, batch, index, (), torch.float32)
        top = None
        if k > 0:
            values, ids = local.top if local.top is not None else (None, None)
            top = (self._gather(values, batch, index, (k,), torch.float32),
                   self._gather(ids, batch, index, (k,), torch.long))
        return LaunchedStep(batch.rows, tokens, ks, chosen, top, verify=self.verify)

    def _gather(self, x: Optional[torch.Tensor], batch: RankBatch, index: torch.Tensor,
                tail: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Every rank's rows of x (this rank's [n, *tail'] with n <= most, tail' <= tail;
        None: none), zero-padded to [most, *tail], gathered and put in the step's order."""
        buf = torch.zeros((batch.most, *tail), dtype=dtype, device=self.device)
        if x is not None and x.shape[0]:
            buf[tuple(slice(0, n) for n in x.shape)] = x
        return self.ranks.all_gather_rows(buf).index_select(0, index)
