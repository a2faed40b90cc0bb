"""Per-request sampling settings (the spec's `SamplingParams`, plus what OpenAI clients send)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

# torch.Generator.manual_seed takes [-2**63, 2**64); outside it the sampler would raise mid-step.
_SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    max_tokens: int = 64
    ignore_eos: bool = False
    stop_strings: Optional[list[str]] = None
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0 = off
    seed: Optional[int] = None  # same seed, same tokens: alone or inside a batch
    stop_token_ids: Optional[list[int]] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: Optional[int] = None  # None = off; k >= 0 = sampled token's logprob plus top-k
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty",
                     "repetition_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.seed is not None and not _SEED_RANGE[0] <= self.seed <= _SEED_RANGE[1]:
            raise ValueError(f"seed must be in [{_SEED_RANGE[0]}, {_SEED_RANGE[1]}], got {self.seed}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 0, got {self.top_k}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be in [0, 20], got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_penalties(self) -> bool:
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)
