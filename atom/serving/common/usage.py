"""What one generation used: OpenAI's usage object plus the spec's timings (seconds from arrival
at the server). Both OpenAI responses carry it and /v1/messages takes its counts from it."""
from __future__ import annotations

from typing import Optional

from msgspec import Struct


class PromptTokensDetails(Struct):
    cached_tokens: int = 0


class UsageInfo(Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    ttft_s: float = 0.0
    tpot_s: float = 0.0
    latency_s: float = 0.0
    prompt_tokens_details: Optional[PromptTokensDetails] = None
