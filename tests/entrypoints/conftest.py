"""Shared servers for the entrypoint tests: started once per session, torn down with their cores.

The main server runs tiny_llama behind the synthetic engine (fixed-rate tokens that the byte-level
stand-in tokenizer decodes to "Hello "), with an API key and a profiler directory, so one process
serves the protocol, delivery, metrics, auth and profiling tests.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from srv_process import API_KEY, MODEL_SERVERS, ServerProcess, synthetic_args

@pytest.fixture(scope="session")
def profiler_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("profiles")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, profiler_dir: Path) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("logs") / "server.log"
    srv = ServerProcess(synthetic_args() + ["--api-key", API_KEY, "--torch-profiler-dir",
                                            str(profiler_dir)], log_path=log)
    yield srv
    srv.stop()
    assert srv.graceful, "SIGTERM did not stop the server and its engine core: " + srv.log_tail()


@pytest.fixture(scope="session")
def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="session", autouse=True)
def model_servers(request, tmp_path_factory) -> Iterator[dict[str, ServerProcess]]:
    """Real-engine servers launched at session start, without waiting: their model loads overlap
    the synthetic-server tests. Only when a test that uses them was collected."""
    wanted = any(item.path.name == "test_server_models.py" for item in request.session.items)
    servers: dict[str, ServerProcess] = {}
    if wanted:
        logs = tmp_path_factory.mktemp("model_logs")
        traces = tmp_path_factory.mktemp("model_profiles")
        for name, args in MODEL_SERVERS.items():
            extra = ["--torch-profiler-dir", str(traces / name)] if name == "default" else []
            servers[name] = ServerProcess(args + extra, log_path=logs / f"{name}.log",
                                          startup_timeout_s=400, wait=False)
            servers[name].profiler_dir = traces / name
    yield servers
    for srv in servers.values():
        srv.stop()
    assert all(srv.graceful for srv in servers.values()), "a model server ignored SIGTERM"
