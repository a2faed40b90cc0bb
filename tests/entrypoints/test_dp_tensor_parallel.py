"""dp=2 over tp=2 replicas behind the real server: two engine cores, each with two rank
processes in a gloo group of its own (its own rendezvous port), answering the openai SDK.

Greedy answers must be the one-process engine's, every rank of both replicas must have
computed (each replica served requests), and SIGTERM must leave none of the six processes.
"""
from __future__ import annotations

import concurrent.futures
from pathlib import Path

import openai
import pytest

from srv_process import ServerProcess, _gone, child_pids
from tests.engine.checkpoints import local_engine, make_checkpoint

PROMPTS = ["The capital of France is", "One, two, three,", "Hello", "def main():"] * 2
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return make_checkpoint("qwen3", tmp_path_factory.mktemp("dptp"))


def _cpu_ticks(pid: int) -> int:
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(stat[11]) + int(stat[12])  # utime + stime


def _cores(srv: ServerProcess) -> list[int]:
    return [p for p in child_pids(srv.proc.pid)
            if b"resource_tracker" not in open(f"/proc/{p}/cmdline", "rb").read()]


def test_two_replicas_of_two_ranks_serve_the_one_process_answers(ckpt, tmp_path):
    from atom import SamplingParams

    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    expected = [o["text"] for o in local_engine(ckpt, "kv_cache.num_blocks=64")
                .generate(PROMPTS, greedy)]
    srv = ServerProcess(["--no-enable-log-stats", "model=local", f"model.path={ckpt}",
                         "runtime=cpu", "load.progress_bar=false", "kv_cache.num_blocks=64",
                         "--tensor-parallel-size", "2", "--data-parallel-size", "2"],
                        log_path=tmp_path / "server.log", startup_timeout_s=240)
    ranks: list[int] = []
    try:
        cores = _cores(srv)
        assert len(cores) == 2
        ranks = [r for c in cores for r in child_pids(c)]
        assert len(ranks) == 4, "each replica runs its own two ranks"
        before = [_cpu_ticks(r) for r in ranks]
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)

        def complete(prompt: str) -> str:
            r = client.completions.create(model=client.models.list().data[0].id, prompt=prompt,
                                          max_tokens=MAX_TOKENS, temperature=0,
                                          extra_body={"ignore_eos": True}, timeout=120)
            return r.choices[0].text

        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            answers = list(pool.map(complete, PROMPTS))
        assert answers == expected
        busy = [_cpu_ticks(r) - b for r, b in zip(ranks, before)]
        assert all(t > 0 for t in busy), f"a rank computed nothing: CPU ticks {busy}"
    finally:
        srv.stop()
    assert srv.graceful and all(_gone(p) for p in ranks)
