"""Profiling a data-parallel server: dp=2 replicas of tp=2 ranks behind the real server, each
rank writing its trace under `{dir}/dp{d}_tp{r}` (the spec's naming for data parallelism;
one replica keeps `rank_{r}`), so the replicas' traces never share a folder."""
from __future__ import annotations

import gzip

import httpx

from srv_process import ServerProcess
from tests.engine.checkpoints import make_checkpoint


def test_every_rank_of_every_replica_writes_its_trace_under_dp_d_tp_r(tmp_path):
    ckpt = make_checkpoint("qwen3", tmp_path / "ckpt")
    traces = tmp_path / "traces"
    srv = ServerProcess(["--no-enable-log-stats", "model=local", f"model.path={ckpt}",
                         "runtime=cpu", "load.progress_bar=false", "kv_cache.num_blocks=64",
                         "--tensor-parallel-size", "2", "--data-parallel-size", "2",
                         "--torch-profiler-dir", str(traces)],
                        log_path=tmp_path / "server.log", startup_timeout_s=240)
    try:
        assert httpx.post(srv.base_url + "/start_profile", timeout=120).status_code == 200
        url = srv.base_url + "/v1/completions"
        body = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        # While one request streams on a replica, the next goes to the other (least loaded).
        with httpx.stream("POST", url, json={**body, "max_tokens": 128, "stream": True},
                          timeout=120) as first:
            lines = first.iter_lines()
            next(line for line in lines if line.startswith("data: {"))
            assert httpx.post(url, json=body, timeout=120).status_code == 200
            assert any(line == "data: [DONE]" for line in lines)
        r = httpx.post(srv.base_url + "/stop_profile", timeout=300)
        assert r.status_code == 200, r.text
    finally:
        srv.stop()
    assert sorted(p.name for p in traces.iterdir()) == ["dp0_tp0", "dp0_tp1", "dp1_tp0",
                                                        "dp1_tp1"]
    for folder in traces.iterdir():
        written = list(folder.glob("*.json.gz"))
        assert len(written) == 1, (folder.name, written)
        assert b"[bs=" in gzip.decompress(written[0].read_bytes()), folder.name
