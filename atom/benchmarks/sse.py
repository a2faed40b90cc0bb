"""Server-sent events, read off an aiohttp response with the arrival time of each read.

Reads by TCP chunk rather than by line: one `data:` line can be far longer than aiohttp's line
limit when a server merges a backlog of tokens into one frame, and a frame can also be split
across reads. Every event decoded from one read carries that read's timestamp, because that is
when the client could first see it.
"""
from __future__ import annotations

import time
from typing import AsyncIterator, Iterator

import aiohttp


def _event_data(event: bytes) -> str | None:
    """The joined `data:` lines of one event, or None for comments / events without data."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return "\n".join(line[5:].decode("utf-8").lstrip(" ") for line in lines)


class SSEDecoder:
    """Incremental: feed bytes, get the data of every event completed so far."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> Iterator[str]:
        self._buf = (self._buf + chunk).replace(b"\r\n", b"\n")
        *events, self._buf = self._buf.split(b"\n\n")
        for event in events:
            if (data := _event_data(event)) is not None:
                yield data

    def close(self) -> Iterator[str]:
        """A stream may end without the final blank line."""
        rest, self._buf = self._buf.strip(b"\r\n"), b""
        if rest and (data := _event_data(rest)) is not None:
            yield data


async def iter_sse_data(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, float]]:
    """Yield `(data, perf_counter at arrival)` for each event of a streaming response."""
    decoder = SSEDecoder()
    async for chunk in response.content.iter_any():
        now = time.perf_counter()
        for data in decoder.feed(chunk):
            yield data, now
    now = time.perf_counter()
    for data in decoder.close():
        yield data, now
