"""What the engine core hands its executor each step: a serializable description of the batch.

No live `Sequence` crosses the executor boundary, so the same message can be handed to a runner
in this process or sent once to every rank of a multi-process executor. The runner keeps what
does not change between steps (sampling parameters, per-request generators) from the step that
first names a request (`new_requests`) until the step that says it is gone (`finished_ids`).
"""
from __future__ import annotations

from typing import Optional

import msgspec

from atom.sampling_params import SamplingParams

# Stands in for a token the device has sampled but the host has not read yet (async scheduling):
# always the last token of a sequence, replaced when its step is resolved; the runner reads it
# from the previous step's device output.
PENDING_TOKEN = -1


class TokenLogprob(msgspec.Struct, array_like=True):
    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # (token_id, logprob) for the top-k alternatives


class NewRequest(msgspec.Struct, array_like=True):
    """Sent with the first step that schedules a request."""

    request_id: str
    sampling_params: SamplingParams
    num_prompt_tokens: int


class ScheduledRequest(msgspec.Struct, array_like=True):
    """One request's share of a step: tokens at positions [start, start + len(token_ids))."""

    request_id: str
    start: int  # tokens already in its KV cache: the first new token's position
    # Tokens computed now. PENDING_TOKEN: sampled by the step before, still on the device (async
    # scheduling). With drafts, the last `num_sampled - 1` are draft tokens to verify.
    token_ids: list[int]
    block_table: list[int]
    # Trailing positions that sample a token: 0 for a prefill chunk short of the prompt's end,
    # 1 normally, 1 + k when k drafts are verified.
    num_sampled: int
    # Every token so far; only for requests with penalties (their steps are resolved on the host
    # before the next is built, so no token here is pending).
    history: Optional[list[int]] = None
    # A prefill chunk short of the prompt's end: the prompt token after it (a draft head's input
    # at the chunk's last position; spec_decode/mtp_drafter.py). None otherwise.
    next_token: Optional[int] = None
    # The rank that runs it and holds its KV (DP attention); block_table indexes that rank's
    # pool. 0 where every rank runs every request.
    rank: int = 0
    # Drafts the step before verified for it that it may keep, scheduled before it resolved
    # (async scheduling with a runner-side drafter): `start` is where it stands if it kept
    # none, the runner adds how many it did (its device verdict). Its token_ids are then all
    # PENDING_TOKEN: that step's last kept token and its drafter's drafts.
    unverified: int = 0

    @property
    def num_drafts(self) -> int:
        return max(0, self.num_sampled - 1)


class SchedulerOutput(msgspec.Struct):
    new_requests: list[NewRequest]
    requests: list[ScheduledRequest]
    finished_ids: list[str]  # requests the runner can forget (finished, aborted or failed)

    @property
    def total_tokens(self) -> int:
        return sum(len(r.token_ids) for r in self.requests)

