"""Start atom's own server for one sweep point, so a sweep can vary the engine as well as the load.

With `bench.launch_server=true`, `python -m atom.bench -m kv_cache=bf16,fp8 bench.max_concurrency=1,64`
serves each point from a fresh `atom.entrypoints.openai_server` composed with that point's
overrides (everything but `bench.*` and `hydra.*`), so the plot compares configs line by line.
The server gets its own process group, and the whole group is ended when it is done with.
Consecutive points that need the same server share one (`SharedServer`): Hydra runs a sweep's
jobs in order in one process, so `-m kv_cache=bf16,fp8 bench.max_concurrency=1,8,64` starts two
servers, not six.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

CLIENT_PREFIXES = ("bench.", "bench=", "hydra.", "hydra/", "job=")


def server_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides that describe the server: drop the client's (`bench.*`, `job=bench`) and
    Hydra's own."""
    return [o for o in overrides if not o.lstrip("+~").startswith(CLIENT_PREFIXES)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM lets uvicorn close the engine core; SIGKILL to the group catches stragglers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


@contextmanager
def launched_server(overrides: Sequence[str], log_path: Path, startup_timeout_s: float = 600.0) -> Iterator[str]:
    """Yields the base URL of a healthy server on a free loopback port."""
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "atom.entrypoints.openai_server", "--host", "127.0.0.1",
           "--server-port", str(port), *server_overrides(overrides)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + startup_timeout_s
            while not _healthy(base_url):
                if proc.poll() is not None:
                    raise RuntimeError(f"atom server exited with {proc.returncode}; see {log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"atom server not healthy after {startup_timeout_s} s; see {log_path}")
                time.sleep(0.25)
            yield base_url
        finally:
            _stop(proc)


class SharedServer:
    """At most one launched server, kept alive while consecutive points ask for the same one."""

    def __init__(self) -> None:
        self._key: Optional[tuple[str, ...]] = None
        self._stack: Optional[ExitStack] = None
        self.url: Optional[str] = None
        atexit.register(self.close)

    def get(self, overrides: Sequence[str], log_path: Path, startup_timeout_s: float) -> str:
        key = tuple(server_overrides(overrides))
        if key == self._key and self.url is not None and _healthy(self.url):
            return self.url
        self.close()
        stack = ExitStack()
        self.url = stack.enter_context(launched_server(overrides, log_path, startup_timeout_s))
        self._stack, self._key = stack, key
        return self.url

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack, self._key, self.url = None, None, None


_SHARED: Optional[SharedServer] = None


def shared_server(overrides: Sequence[str], log_path: Path, startup_timeout_s: float = 600.0) -> str:
    """A healthy server for these overrides: the previous point's when it matches, else a new one
    (the previous one is stopped first, so two never share the GPU)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = SharedServer()
    return _SHARED.get(overrides, log_path, startup_timeout_s)
