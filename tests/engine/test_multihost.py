"""Two "hosts" on one machine: tensor parallelism across launchers that meet over loopback TCP.

Node 0 is this process's engine with one local rank; node 1 is `python -m atom.run ...
parallel.node_rank=1` (the headless launcher) with the other. They rendezvous at
master_addr:master_port as two real hosts would (torch.distributed's TCP store, gloo, and the
steps over TCP ZMQ), so greedy tokens must be tp=1's. A node-1 rank killed mid-request must fail
the engine within seconds, and every process on both "hosts" must be gone after shutdown.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atom import SamplingParams
from atom.executor.rank_driver import WorkerDied
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.rank_processes import children, gone, killed_rank_fails_fast, procs, tp_prompts

REPO = Path(__file__).resolve().parents[2]
COMMON = ["kv_cache.num_blocks=64", "scheduler.max_num_batched_tokens=48"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("qwen3", tmp_path_factory.mktemp("hosts"))


def _free_ports(n: int) -> int:
    """A port p with p .. p+n-1 all free (rendezvous, answers, one step port per rank)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            socks = []
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def _hosts(port: int, node_rank: int) -> list[str]:
    return ["parallel.tensor_parallel_size=2", "parallel.nnodes=2",
            f"parallel.node_rank={node_rank}", "parallel.master_addr=127.0.0.1",
            f"parallel.master_port={port}"]


def _start_node1(ckpt: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "atom.run", "model=local", f"model.path={ckpt}",
                             "runtime=cpu", "load.progress_bar=false", *COMMON, *_hosts(port, 1)],
                            env=env)


def _session(sid: int) -> list[int]:
    """Live processes of session `sid` (a launcher started with start_new_session, and all it
    started: ranks included)."""
    return [p for p, stat in procs() if int(stat[3]) == sid and stat[0] != "Z"]


def _node0(ckpt: Path, port: int):
    return local_engine(ckpt, *COMMON, *_hosts(port, 0))


def test_two_hosts_give_the_one_process_tokens(ckpt):
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    one = local_engine(ckpt, *COMMON).generate(tp_prompts(), greedy)
    port = _free_ports(4)
    node1 = _start_node1(ckpt, port)
    try:
        engine = _node0(ckpt, port)
        node1_ranks = children(node1.pid)
        assert len(node1_ranks) == 1, "node 1 runs its one rank, and no engine"
        try:
            two = engine.generate(tp_prompts(), greedy)
        finally:
            node0_ranks = [p.pid for p in engine.core.executor._procs]
            engine.shutdown()
        assert [o["token_ids"] for o in two] == [o["token_ids"] for o in one]
        assert len(node0_ranks) == 1, "node 0 runs its one local rank only"
        assert node1.wait(30) == 0, "node 1's launcher ends when node 0 stops its ranks"
        assert gone(node0_ranks + node1_ranks)
    finally:
        if node1.poll() is None:
            node1.kill()


def test_a_killed_rank_on_the_other_host_fails_the_engine_at_once(ckpt):
    port = _free_ports(4)
    node1 = _start_node1(ckpt, port)
    try:
        engine = _node0(ckpt, port)
        node1_ranks = children(node1.pid)
        try:
            killed_rank_fails_fast(engine, lambda: node1_ranks[0])
        finally:
            node0_ranks = [p.pid for p in engine.core.executor._procs]
            engine.shutdown()
        assert node1.wait(30) != 0, "node 1's launcher reports the rank it lost"
        assert gone(node0_ranks + node1_ranks + [node1.pid])
    finally:
        if node1.poll() is None:
            node1.kill()


def test_a_frozen_host_fails_the_engine_once_it_falls_silent(ckpt, monkeypatch):
    """SIGSTOP on node 1 (its launcher and rank): nothing exits and no socket closes, so only
    the launcher's missing beats tell node 0; the step waiting on it fails instead of hanging.
    Node 0 (this process) gives up after 4 s of silence here, not 10: the launcher beats every
    second, and the wait is what this test would spend most of its time on."""
    from atom.executor import rank_driver

    monkeypatch.setattr(rank_driver, "HOST_SILENCE_S", 4.0)
    port = _free_ports(4)
    node1 = _start_node1(ckpt, port)
    frozen: list[int] = []
    try:
        engine = _node0(ckpt, port)
        frozen = [node1.pid, *children(node1.pid)]
        try:
            engine.add_request(tp_prompts(), SamplingParams(temperature=0, max_tokens=200,
                                                          ignore_eos=True))
            engine.step()
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            t0 = time.monotonic()
            with pytest.raises(WorkerDied, match="host 1 has been silent"):
                for _ in range(400):
                    engine.step()
            assert time.monotonic() - t0 < rank_driver.HOST_SILENCE_S + 5
        finally:
            node0_ranks = [p.pid for p in engine.core.executor._procs]
            t0 = time.monotonic()
            engine.shutdown()
            shutdown_s = time.monotonic() - t0
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        node1.wait(30)
        assert gone(node0_ranks + frozen)
        # Node 0's own rank sits in a collective with the frozen one and never reads Stop:
        # once a rank is known dead, shutdown ends the others after DEAD_GRACE_S, not 10 s.
        assert shutdown_s < rank_driver.DEAD_GRACE_S + 4
    finally:
        if node1.poll() is None:
            node1.kill()


def test_an_engine_is_refused_on_another_host(ckpt):
    """Node 1 runs ranks only (atom.run's headless path); an in-process engine there would wait
    for ranks nobody starts."""
    from atom.config.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        local_engine(ckpt, *COMMON, *_hosts(_free_ports(4), 1))
    assert e.value.field == "parallel.node_rank" and "python -m atom.run" in e.value.rule


def test_torchrun_starts_both_hosts_from_its_environment(ckpt, tmp_path):
    """torchrun, one launcher per host (--nproc-per-node 1): atom takes the hosts from its
    WORLD_SIZE/RANK/MASTER_* (its ranks meeting one port above the agent's store), node 0 runs
    job=generate over both, and both torchruns end cleanly with nothing left behind."""
    import shutil

    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    port = _free_ports(5)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # job=generate asks 256 tokens of each of its four ~35-token prompts: a 64-token context
    # ends them at length after ~28 steps, not 256 steps over TCP.
    args = ["-m", "atom.run", "model=local", f"model.path={ckpt}", "runtime=cpu",
            "load.progress_bar=false", "runtime.enable_log_stats=false", "job=generate",
            *COMMON, "parallel.tensor_parallel_size=2", "model.max_model_len=64"]
    logs = [tmp_path / f"node{k}.log" for k in (0, 1)]
    hosts = [subprocess.Popen([torchrun, "--nnodes", "2", "--node-rank", str(k),
                               "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                               "--master-port", str(port), *args], env=env,
                              stdout=open(logs[k], "w"), stderr=subprocess.STDOUT,
                              start_new_session=True) for k in (0, 1)]
    try:
        codes = [h.wait(240) for h in hosts]
    finally:
        for h in hosts:
            if h.poll() is None:
                os.killpg(h.pid, signal.SIGKILL)
    assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    assert " tokens in " in logs[0].read_text()
    assert "host 1 of 2: ranks [1]" in logs[1].read_text()
    assert not [p for h in hosts for p in _session(h.pid)], "a process outlived its torchrun"
