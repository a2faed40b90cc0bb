"""The server over parallel.executor=ray: the engine core's process is Ray's driver (it starts a
local cluster here, where none runs), two rank actors answer the completions, and a SIGTERM to
the server leaves none of the processes it started — Ray's own included. (Without ray
installed the server refuses parallel.executor at start: a failure, never a skip.)"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from srv_process import ServerProcess, _gone, child_pids
from tests.engine.checkpoints import local_engine, make_checkpoint


def _tree(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for c in child_pids(todo.pop()):
            found.add(c)
            todo.append(c)
    return found


def test_a_ray_server_answers_as_one_process_and_sigterm_leaves_no_process(tmp_path: Path):
    from atom import SamplingParams

    ckpt = make_checkpoint("qwen3", tmp_path / "ckpt")
    prompt = "The capital of France is"
    expected = local_engine(ckpt, "kv_cache.num_blocks=64").generate(
        [prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]["text"]
    srv = ServerProcess(["--no-enable-log-stats", "model=local", f"model.path={ckpt}",
                         "runtime=cpu", "load.progress_bar=false", "kv_cache.num_blocks=64",
                         "parallel.executor=ray", "parallel.tensor_parallel_size=2"],
                        log_path=tmp_path / "server.log", startup_timeout_s=240)
    started: set[int] = set()
    try:
        body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        r = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=120)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == expected
        started = _tree(srv.proc.pid)
        assert len(started) > 3, "a core, Ray's processes and two rank actors"
        os.kill(srv.proc.pid, signal.SIGTERM)
        srv.proc.wait(60)
        left = [p for p in started if not _gone(p, 30)]
        assert not left, f"processes outlived the server: {left}"
    finally:
        srv.stop()
