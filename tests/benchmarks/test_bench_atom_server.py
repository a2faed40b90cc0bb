"""The benchmark against atom itself: tiny_llama with dummy weights, served on CPU.

The server is started by `atom.benchmarks.server_launcher` — what `bench.launch_server=true`
uses for each sweep point — so the launcher is exercised on the way.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import pytest
from hydra import compose, initialize_config_dir

import atom.benchmarks.server_launcher as launcher
from atom.bench import run_point
from atom.benchmarks.benchmark_serving import cli
from atom.benchmarks.benchmark_utils import read_result_json
from atom.benchmarks.plots import make_plots
from atom.config.compose import CONF_DIR
from atom.config.store import register_schema

MODEL = "tiny_llama"
N_OUT = 8


@pytest.fixture(scope="module")
def atom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("atom_server")
    profiles = root / "profiles"
    overrides = [f"model={MODEL}", "load=dummy", f"profiler.torch_profiler_dir={profiles}",
                 "kv_cache.num_blocks=256", "runtime.enable_log_stats=false",
                 "server.disable_uvicorn_access_log=true", "bench.max_concurrency=4"]
    with launcher.launched_server(overrides, root / "server.log", startup_timeout_s=240) as url:
        yield url, profiles


def test_server_overrides_leave_out_the_client():
    assert launcher.server_overrides(["model=x", "bench.port=1", "+bench.y=2", "hydra.run.dir=d",
                                      "+experiment=e", "kv_cache=fp8"]) == ["model=x", "+experiment=e", "kv_cache=fp8"]


def _argv(url: str, tokenizer: object, *extra: str) -> list[str]:
    return ["--model", MODEL, "--tokenizer", str(tokenizer), "--base-url", url,
            "--dataset-name", "random", "--random-input-len", "12", "--random-output-len",
            str(N_OUT), "--ignore-eos", "--disable-tqdm", *extra]


def test_completions_with_profile_and_saved_result(atom_server, tmp_path, capsys):
    """`--tokenizer bytes` matches the dummy-weight server's stand-in, so the two agree on every
    prompt's length."""
    url, profiles = atom_server
    result = cli(_argv(url, "bytes", "--backend", "vllm", "--num-prompts", "8",
                       "--max-concurrency", "4", "--profile", "--save-result", "--result-dir",
                       str(tmp_path), "--result-filename", "atom.json",
                       "--percentile-metrics", "ttft,tpot,itl,e2el", "--goodput", "e2el:600000"))
    assert result["completed"] == 8 and result["failed"] == 0, result["errors"]
    assert result["output_lens"] == [N_OUT] * 8  # usage.completion_tokens, EOS ignored
    assert result["output_throughput"] == pytest.approx(8 * N_OUT / result["duration"])
    tpots = [(lat - ttft) / (N_OUT - 1) for lat, ttft in zip(result["latencies"], result["ttfts"])]
    assert result["mean_tpot_ms"] == pytest.approx(1000 * sum(tpots) / len(tpots))
    assert result["mean_itl_ms"] > 0 and result["itl_tpot_ratio"] >= 0.99
    assert result["request_goodput"] == pytest.approx(result["request_throughput"])
    assert result["max_concurrency_observed"] <= 4
    assert result["server_total_input_tokens"] == result["total_input_tokens"] == 8 * 12
    assert "WARNING" not in capsys.readouterr().out
    saved = read_result_json(tmp_path / "atom.json")
    assert saved["mean_tpot_ms"] == result["mean_tpot_ms"] and saved["itls"] == result["itls"]
    assert list(profiles.rglob("*.json.gz")) or list(profiles.rglob("*.json")), "no trace written"


def test_chat_backend(atom_server, tokenizer_dir):
    url, _ = atom_server
    result = cli(_argv(url, tokenizer_dir, "--backend", "openai-chat", "--num-prompts", "4"))
    assert result["completed"] == 4, result["errors"]
    assert result["output_lens"] == [N_OUT] * 4 and result["mean_ttft_ms"] > 0


def test_bench_config_sweep_points_and_plot(atom_server, tokenizer_dir, tmp_path, monkeypatch):
    """What each job of `python -m atom.bench -m ... bench.launch_server=true` does, in-process.
    The launch is redirected to the running server; consecutive points with the same server
    overrides share one launch, a changed one gets its own (and its own plot line)."""
    url, _ = atom_server
    launched: list[list[str]] = []

    @contextlib.contextmanager
    def reuse(overrides, log_path, timeout_s):
        launched.append(launcher.server_overrides(overrides))
        yield url

    monkeypatch.setattr(launcher, "launched_server", reuse)
    monkeypatch.setattr(launcher, "_SHARED", None)
    register_schema()
    points = [(1, []), (4, []), (2, ["kv_cache=bf16"])]
    for conc, server_side in points:
        overrides = [f"model={MODEL}", "load=dummy", *server_side, "bench.base_url=http://127.0.0.1:1",
                     "bench.launch_server=true", f"bench.tokenizer={tokenizer_dir}",
                     "bench.num_prompts=4", "bench.random_input_len=12",
                     f"bench.random_output_len={N_OUT}", "bench.disable_tqdm=true",
                     f"bench.max_concurrency={conc}"]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            node = compose("config", overrides=overrides)
        result = run_point(node, tmp_path / str(conc), overrides)
        assert result["completed"] == 4
        assert result["label"] == " ".join([f"vllm:{MODEL}", f"model={MODEL}", "load=dummy", *server_side])
        assert (tmp_path / str(conc) / "config.yaml").exists()
    assert launched == [[f"model={MODEL}", "load=dummy"], [f"model={MODEL}", "load=dummy", "kv_cache=bf16"]]
    launcher._SHARED.close()
    paths = make_plots(tmp_path)
    assert (tmp_path / "throughput_vs_tpot.png").read_bytes()[:4] == b"\x89PNG" and len(paths) == 3
