"""One request inside the engine core: its tokens, how many are computed, and its KV blocks."""
from __future__ import annotations

from enum import Enum, auto
from typing import Optional

from atom.sampling_params import SamplingParams


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    __slots__ = ("request_id", "token_ids", "num_prompt_tokens", "params", "arrival_time", "status",
                 "num_computed_tokens", "num_cached_tokens", "block_table", "num_hashed_blocks",
                 "block_hashes", "finish_reason", "num_emitted", "num_preemptions", "stop_len",
                 "spec_token_ids", "announced", "rank", "num_unverified")

    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 arrival_time: float = 0.0) -> None:
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.arrival_time = arrival_time
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0  # tokens whose KV is in the cache
        self.num_cached_tokens = 0  # of those, how many came from the prefix cache
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # hash chain of this sequence's full blocks
        self.num_hashed_blocks = 0  # leading blocks already registered in the prefix cache
        self.finish_reason: Optional[str] = None
        self.num_emitted = 0  # output tokens already reported to the client
        self.num_preemptions = 0
        # Token count at which it stops by length (max_tokens; the scheduler also caps it at
        # max_model_len): one int compare per step instead of two property chains.
        self.stop_len = self.num_prompt_tokens + params.max_tokens
        # Draft tokens to verify at its next step (a proposer's guess of what follows), consumed
        # when scheduled; empty = a plain one-token decode.
        self.spec_token_ids: list[int] = []
        self.announced = False  # the executor has been told of this request (SchedulerOutput)
        # The rank whose KV pool holds its blocks (DP attention: chosen at each admission); 0
        # where the ranks share one pool.
        self.rank = 0
        # Drafts of its unresolved verify step, whose KV is written but which it may not keep:
        # num_computed_tokens counts none of them until that step resolves.
        self.num_unverified = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, {self.status.name})")
