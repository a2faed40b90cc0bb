"""What crosses the boundary between an engine core and its client, in-process or over IPC.

msgspec Structs so the server's client can ship them over ZMQ without a second schema.
"""
from __future__ import annotations

from typing import Optional

import msgspec

from atom.runner.scheduler_output import TokenLogprob
from atom.sampling_params import SamplingParams


class EngineRequest(msgspec.Struct, kw_only=True):
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float = 0.0


class StepOutput(msgspec.Struct, kw_only=True, array_like=True):
    """One request's progress in one engine step: only the tokens new in this step."""

    request_id: str
    new_token_ids: list[int]
    finished: bool = False
    finish_reason: Optional[str] = None  # stop | length | abort | error
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    logprobs: Optional[list[TokenLogprob]] = None
    error: Optional[str] = None  # why the engine failed this request (finish_reason "error")
    rejected: bool = False  # refused before it ran (its own input), not failed in a step


class EngineStats(msgspec.Struct, kw_only=True):
    num_running: int = 0
    num_waiting: int = 0
    num_preempted_total: int = 0
    kv_blocks_total: int = 0
    kv_blocks_free: int = 0
    prefix_cache_queries: int = 0  # prompt blocks looked up
    prefix_cache_hits: int = 0  # prompt blocks found cached
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    num_steps: int = 0
    spec_num_speculative_tokens: int = 0  # k drafts per step; 0 = speculative decoding off
    spec_draft_tokens: int = 0  # drafts verified
    spec_accepted_tokens: int = 0  # of those, kept
    spec_verify_forwards: int = 0  # sequence-steps that verified at least one draft
    spec_drafts_per_position: list[int] = msgspec.field(default_factory=list)  # per draft slot
    spec_accepted_per_position: list[int] = msgspec.field(default_factory=list)

    @staticmethod
    def total(parts: list["EngineStats"]) -> "EngineStats":
        """Several cores' stats as one (data parallelism): counts add, per-slot lists add slot by
        slot, and k is the cores' shared setting, not a count."""
        out = EngineStats()
        for part in parts:
            for name in EngineStats.__struct_fields__:
                a, b = getattr(out, name), getattr(part, name)
                if isinstance(b, list):
                    width = max(len(a), len(b))
                    a, b = a + [0] * (width - len(a)), b + [0] * (width - len(b))
                    setattr(out, name, [x + y for x, y in zip(a, b)])
                elif name == "spec_num_speculative_tokens":
                    setattr(out, name, max(a, b))
                else:
                    setattr(out, name, a + b)
        return out

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.kv_blocks_free / self.kv_blocks_total if self.kv_blocks_total else 0.0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
