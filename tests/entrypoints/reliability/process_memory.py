"""Resident memory of a server process, read from /proc (Linux): what a leak grows."""
from __future__ import annotations

from pathlib import Path


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
