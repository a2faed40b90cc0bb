"""Hydra sweeps (`python -m atom.bench -m ...`), experiment files, and the plot command."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from atom.bench import bench_args
from atom.benchmarks.benchmark_utils import read_result_json
from atom.benchmarks.plots import make_plots
from atom.config.compose import CONF_DIR
from atom.config.store import register_schema
from bench_fakes import Behavior, FakeServer

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def _sweep(tmp_path: Path, server: FakeServer, tokenizer_dir: Path, *overrides: str) -> Path:
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "atom.bench", "-m", "model=tiny_llama", "load=dummy",
           f"bench.base_url={server.base_url}", f"bench.tokenizer={tokenizer_dir}",
           "bench.num_prompts=6", "bench.random_input_len=16", "bench.random_output_len=8",
           "bench.disable_tqdm=true", f"hydra.sweep.dir={sweep_dir}", *overrides]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir


def test_two_point_sweep_writes_results_and_plots(tmp_path, tokenizer_dir):
    with FakeServer("completions", Behavior(token_interval_s=0.003)) as server:
        sweep_dir = _sweep(tmp_path, server, tokenizer_dir, "bench.max_concurrency=1,3",
                           "bench.label=fake")
    results = []
    for job in ("0", "1"):
        assert (sweep_dir / job / "config.yaml").exists()
        assert "max_concurrency" in (sweep_dir / job / "config.yaml").read_text()
        results.append(read_result_json(sweep_dir / job / "result.json"))
        assert (sweep_dir / job / "result.pytorch.json").exists()
    assert [r["max_concurrency"] for r in results] == [1, 3]
    assert all(r["completed"] == 6 and r["label"] == "fake" for r in results)
    assert any(v == "bench.max_concurrency=3" for v in results[1]["metadata"].values())
    paths = make_plots(sweep_dir)
    names = {p.name for p in paths}
    assert names == {"throughput_vs_tpot.png", "throughput_vs_ttft.png", "index.html"}
    for p in paths:
        assert p.stat().st_size > 0
    assert (sweep_dir / "throughput_vs_tpot.png").read_bytes()[:4] == b"\x89PNG"
    html = (sweep_dir / "index.html").read_text()
    assert html.count("<tr>") == 3 and "fake" in html


def test_plot_cli_and_one_line_per_label(tmp_path):
    from atom.benchmarks.benchmark_utils import write_to_json
    from atom.benchmarks.plots import group_by_label, load_results, main

    for i, (label, conc) in enumerate([("a", 1), ("a", 8), ("b", 1), ("b", 8)]):
        write_to_json(tmp_path / str(i) / "result.json", {
            "label": label, "max_concurrency": conc, "request_rate": float("inf"),
            "output_throughput": 100.0 * conc, "median_tpot_ms": 5.0 + conc,
            "median_ttft_ms": 20.0 * conc})
    write_to_json(tmp_path / "0" / "result.pytorch.json", [{"metric": {}}])
    groups = group_by_label(load_results(tmp_path))
    assert list(groups) == ["a", "b"] and [p["max_concurrency"] for p in groups["a"]] == [1, 8]
    out = tmp_path / "plots"
    assert len(main([str(tmp_path), "--out", str(out)])) == 3
    assert (out / "throughput_vs_ttft.png").exists()
    with pytest.raises(FileNotFoundError):
        make_plots(tmp_path / "empty")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_files_compose(name):
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        node = compose("config", overrides=[f"+experiment={name}", "bench.tokenizer=/tok"])
    from atom.bench import _typed

    cfg = _typed(node)
    args = bench_args(cfg, None)
    assert args.tokenizer == "/tok" and args.dataset_name == "random" and args.ignore_eos
    assert args.label and "${" not in args.label


def test_full_benchmark_experiment_matches_the_spec():
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        node = compose("config", overrides=["+experiment=deepseek_r1_full_benchmark"])
    from atom.bench import _typed

    args = bench_args(_typed(node), None)
    assert (args.model, args.backend, args.base_url) == ("deepseek-ai/DeepSeek-R1", "vllm", "http://localhost:8000")
    assert (args.random_input_len, args.random_output_len, args.random_range_ratio) == (1024, 1024, 0.8)
    assert (args.max_concurrency, args.num_prompts, args.request_rate) == (128, 1280, float("inf"))
    assert args.ignore_eos and args.save_result and args.percentile_metrics == "ttft,tpot,itl,e2el"
    assert args.result_filename == "Deepseek-R1-result.json"
    assert node.parallel.tensor_parallel_size == 8 and node.kv_cache.dtype == "fp8"


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF_DIR / "bench").glob("*.yaml")))
def test_bench_group_files_compose(name):
    from atom.bench import _typed

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        node = compose("config", overrides=[f"bench={name}", "model=tiny_llama", "load=dummy"])
    args = bench_args(_typed(node), None)
    assert (args.backend, args.dataset_name) == (node.bench.backend, node.bench.dataset_name)
    assert args.model == "tiny_llama"
