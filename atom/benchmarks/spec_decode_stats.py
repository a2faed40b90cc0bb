"""Speculative-decoding acceptance from the server's `/debug/mtp_stats`, over the benchmark run.

The server's counters are cumulative since start-up (warm-up and earlier runs included), so the
benchmark reads them before and after and reports the difference. A server without the endpoint,
or with speculative decoding off, yields None and nothing is printed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import aiohttp

MTP_STATS_PATH = "/debug/mtp_stats"
_FORWARD_KEYS = ("total_forwards", "num_forwards", "total_verify_steps", "num_verify_steps", "total_steps")


@dataclass
class SpecDecodeStats:
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float  # accepted / drafted
    accept_length: Optional[float]  # tokens per target forward = 1 + accepted per forward


async def fetch_mtp_stats(session: aiohttp.ClientSession, base_url: str,
                          api_key: Optional[str] = None) -> Optional[dict[str, Any]]:
    """The endpoint's JSON, or None when it is absent, disabled or unreachable. atom's server
    guards it with its API key like every route but /health."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with session.get(base_url.rstrip("/") + MTP_STATS_PATH, headers=headers,
                               timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return None
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("enabled") is False:
        return None
    return body


def _num(stats: Optional[dict[str, Any]], key: str) -> float:
    return float((stats or {}).get(key) or 0)


def _forwards(stats: Optional[dict[str, Any]]) -> Optional[float]:
    key = next((k for k in _FORWARD_KEYS if (stats or {}).get(k) is not None), None)
    return _num(stats, key) if key else None


def spec_decode_delta(before: Optional[dict[str, Any]], after: Optional[dict[str, Any]]) -> Optional[SpecDecodeStats]:
    """Acceptance over the run, or None when no draft token was proposed during it."""
    if after is None:
        return None
    drafted = _num(after, "total_draft_tokens") - _num(before, "total_draft_tokens")
    if drafted <= 0:
        return None
    accepted = _num(after, "total_accepted_tokens") - _num(before, "total_accepted_tokens")
    rate = accepted / drafted
    fwd_after, fwd_before = _forwards(after), _forwards(before)
    if fwd_after is not None and fwd_after - (fwd_before or 0) > 0:
        length: Optional[float] = 1.0 + accepted / (fwd_after - (fwd_before or 0))
    elif after.get("average_tokens_per_forward") is not None:
        length = float(after["average_tokens_per_forward"])  # cumulative, the best available
    elif after.get("num_speculative_tokens"):
        length = 1.0 + rate * float(after["num_speculative_tokens"])
    else:
        length = None
    return SpecDecodeStats(int(drafted), int(accepted), rate, length)
