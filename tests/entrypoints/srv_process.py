"""Launch `python -m atom.entrypoints.openai_server` on a free loopback port, and clean it up.

The server runs in its own session so teardown can signal the whole group (API process and engine
core); a test that leaked either would hold a port or a CPU for the rest of the suite.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import httpx

REPO = Path(__file__).resolve().parents[2]

API_KEY = "sk-test-atom"
HELLO_IDS = "[72,101,108,108,111,32]"  # "Hello " in the byte-level tokenizer


def synthetic_args(rate: float = 200.0) -> list[str]:
    return ["--model", "tiny_llama", "--load-dummy", "--engine-source", "synthetic",
            "--synthetic-tokens-per-s", str(rate), f"server.synthetic_token_ids={HELLO_IDS}",
            "kv_cache.num_blocks=4096", "--no-enable-log-stats"]


MODEL_SERVERS = {
    "tiny": ["--model", "tiny_llama", "--load-dummy", "xavier", "--no-enable-log-stats",
             "kv_cache.num_blocks=256", "runtime=cpu"],
    "default": ["--no-enable-log-stats", "runtime=cpu", "kv_cache.num_blocks=128"],  # + profiler dir
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_pids(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


class ServerProcess:
    def __init__(self, args: Sequence[str], env: Optional[dict[str, str]] = None,
                 startup_timeout_s: float = 150.0, log_path: Optional[Path] = None,
                 wait: bool = True) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "atom.entrypoints.openai_server", "--host", "127.0.0.1",
               "--server-port", str(self.port), *args]
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.log_path = log_path
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, cwd=str(REPO), env=full_env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._launched = time.monotonic()
        self.startup_timeout_s = startup_timeout_s
        self.healthy = False
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> "ServerProcess":
        """Block until /health answers 200 (counting from launch), or fail with the log tail."""
        if not self.healthy:
            self._wait_healthy(self.startup_timeout_s - (time.monotonic() - self._launched))
            self.healthy = True
        return self

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"server not healthy after {timeout_s} s: {self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        return ""

    def core_pid(self) -> int:
        """The engine-core process: the server's multiprocessing child that is not the resource
        tracker."""
        for pid in child_pids(self.proc.pid):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"resource_tracker" not in cmdline:
                return pid
        raise RuntimeError("no engine core process found")

    def stop(self) -> None:
        """SIGTERM (graceful: uvicorn shutdown closes the core), then SIGKILL the group.
        `graceful` says whether the server and its core had both exited before the SIGKILL."""
        core = None
        if self.proc.poll() is None:
            try:
                core = self.core_pid()
            except RuntimeError:
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.graceful = self.proc.returncode is not None and (core is None or _gone(core))
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(5)
        if self._log is not subprocess.DEVNULL:
            self._log.close()


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    """The process has exited (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
