"""A SIGTERM to the server's whole process group (what timeout, systemd and docker stop send;
Ctrl-C in a terminal sends SIGINT the same way) stops the API and the engine core cleanly: no
traceback and no `leaked semaphore objects` warning from the core killed under tqdm's lock."""
from __future__ import annotations

import os
import signal
import subprocess

from srv_process import ServerProcess
from tests.engine.checkpoints import make_checkpoint


def test_sigterm_to_the_process_group_stops_both_processes_cleanly(tmp_path):
    ckpt = make_checkpoint("llama", tmp_path)  # a real checkpoint: its loader shows a progress bar
    log = tmp_path / "server.log"
    srv = ServerProcess(["--model", str(ckpt), "runtime=cpu", "kv_cache.num_blocks=64",
                         "--no-enable-log-stats"], log_path=log)
    try:
        core = srv.core_pid()
        os.killpg(srv.proc.pid, signal.SIGTERM)
        try:
            srv.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
    finally:
        srv.stop()
    text = log.read_text(errors="replace")
    # uvicorn shuts down, then re-raises the signal it caught: -SIGTERM after a graceful stop
    assert srv.proc.returncode == -signal.SIGTERM and "Finished server process" in text, text[-3000:]
    assert not os.path.exists(f"/proc/{core}/cmdline") or "Z" in open(f"/proc/{core}/stat").read()
    assert "leaked semaphore" not in text, text[-3000:]
    assert text.count("using a byte-level stand-in") == 1, "once, by the API process"
    assert "Traceback" not in text and "engine core failed" not in text, text[-3000:]
