"""Every launcher reports a bad config the same way, before anything loads: one
`atom: invalid config: …` line per broken rule on stderr, exit status 2, no traceback, and no file
left in the working directory."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KV_FP16 = "atom: invalid config: kv_cache.dtype='fp16': must be one of bf16, fp8"


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout)


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("args,line", [
    (["atom.run", "kv_cache.dtype=fp16"], KV_FP16),
    (["atom.entrypoints.openai_server", "--kv-cache-dtype", "fp16"], KV_FP16),
    (["atom.examples.simple_inference", "--kv-cache-dtype", "fp16"], KV_FP16),
    (["atom.benchmarks.throughput", "--model", "tiny_llama", "--load-dummy", "--kv-cache-dtype",
      "fp16"], KV_FP16),
    (["atom.run", "kv_cache=fp16"], "atom: invalid config: kv_cache='fp16': must be one of bf16, fp8"),
    (["atom.bench", "kv_cache=fp16"], "atom: invalid config: kv_cache='fp16': must be one of bf16, fp8"),
    (["atom.run", "+server.prot=8001"],
     "atom: invalid config: server.prot=8001: no such field (did you mean port?)"),
    (["atom.entrypoints.openai_server", "server.prot=8001"],
     "atom: invalid config: server.prot=8001: no such field (did you mean port?)"),
    (["atom.run", "kv_cache.dtype"],
     "atom: invalid config: override=kv_cache.dtype: must read key=value (e.g. kv_cache.dtype=fp8)"),
])
def test_every_launcher_prints_one_line_and_exits_2(args, line, tmp_path):
    r = _run(args, tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert _lines(r.stderr) == [line]
    assert list(tmp_path.iterdir()) == [], "a failed launch left files in the working directory"


def test_all_broken_rules_at_once_from_the_command_line(tmp_path):
    r = _run(["atom.run", "model=deepseek_r1", "model.hf_config.architectures=[DeepseekV2ForCausalLM]",
              "parallel=tp2", "parallel.enable_dp_attention=true", "specdecode=mtp"], tmp_path)
    assert r.returncode == 2
    assert [line.split(":")[2].split("=")[0].strip() for line in _lines(r.stderr)] == [
        "model", "load.dummy", "specdecode.method", "parallel.enable_dp_attention",
        "specdecode.method"]


def test_a_busy_http_port_is_refused_before_the_model_loads_with_the_port_flag_hint(tmp_path):
    """vLLM's --port is the HTTP port; the spec's is the engine's. A user who typed --port and
    finds the HTTP port busy is told which flag sets it — in seconds, not after the model load."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t0 = time.monotonic()
        r = _run(["atom.entrypoints.openai_server", "--host", "127.0.0.1", "--server-port",
                  str(port), "--port", "8007"], tmp_path)
        elapsed = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    (line,) = _lines(r.stderr)
    assert line.startswith(f"atom: invalid config: server.port={port}: cannot listen on "
                           f"127.0.0.1:{port}: ")
    assert line.endswith("(--port 8007 set parallel.engine_port, the engine's internal port; "
                         "the HTTP port is --server-port / server.port)")
    assert elapsed < 60, "the port must be checked before the model loads"


def test_a_single_run_writes_nothing_into_the_working_directory(tmp_path):
    """Hydra's outputs/<date>/<time> (.hydra, run.log, config.yaml) is not created by a plain
    run; output_dir= asks for the resolved config (written before the job starts: here a server
    whose port is taken, which stops before anything loads)."""
    r = _run(["atom.run", "model=tiny_llama", "load=dummy", "kv_cache.block_size=12"], tmp_path)
    assert r.returncode == 2 and list(tmp_path.iterdir()) == []
    out = tmp_path / "kept"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _run(["atom.run", "model=tiny_llama", "load=dummy", "server.host=127.0.0.1",
                  f"server.port={port}", f"output_dir={out}"], tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"port: {port}" in (out / "config.yaml").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
