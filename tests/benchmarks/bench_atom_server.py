"""Start atom's OpenAI server (tiny_llama, dummy weights, CPU) on a free loopback port.

Its own session, so teardown signals the API process and its engine core together.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
MODEL = "tiny_llama"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AtomServer:
    def __init__(self, extra: Sequence[str], log_path: Path, startup_timeout_s: float = 180.0) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = [sys.executable, "-m", "atom.entrypoints.openai_server", "--host", "127.0.0.1",
               "--server-port", str(self.port), "--model", MODEL, "--load-dummy", "xavier",
               "--no-enable-log-stats", "--disable-uvicorn-access-log", *extra]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(startup_timeout_s)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"atom server exited ({self.proc.returncode}): {self.log_tail()}")
            if self._healthy():
                return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"atom server not healthy after {timeout_s} s: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(5)
        self._log.close()
