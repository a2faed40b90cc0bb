"""The whole benchmark, CLI to saved JSON, against the fake servers."""
from __future__ import annotations

import json

import pytest

from atom.benchmarks.benchmark_serving import cli, default_args, resolve_urls
from atom.benchmarks.benchmark_utils import pytorch_format_path, read_result_json
from bench_fakes import Behavior, FakeServer

INTERVAL = 0.004


def _argv(server: FakeServer, tokenizer_dir, *extra: str) -> list[str]:
    return ["--backend", "vllm", "--model", "fake-model", "--tokenizer", str(tokenizer_dir),
            "--base-url", server.base_url, "--dataset-name", "random", "--random-input-len", "16",
            "--random-output-len", "10", "--num-prompts", "12", "--ignore-eos", "--disable-tqdm",
            *extra]


def test_metrics_are_consistent_and_the_json_round_trips(tmp_path, tokenizer_dir, capsys):
    with FakeServer("completions", Behavior(token_interval_s=INTERVAL)) as server:
        result = cli(_argv(server, tokenizer_dir, "--max-concurrency", "4", "--save-result",
                           "--result-dir", str(tmp_path), "--result-filename", "r.json",
                           "--percentile-metrics", "ttft,tpot,itl,e2el",
                           "--metric-percentiles", "50,99", "--goodput", "ttft:10000", "tpot:10000"))
        peak = server.record.peak_in_flight
    printed = capsys.readouterr().out
    assert result["completed"] == 12 and result["failed"] == 0
    assert result["output_lens"] == [10] * 12 and result["total_output_tokens"] == 120
    assert result["output_throughput"] == pytest.approx(120 / result["duration"])
    assert result["request_throughput"] == pytest.approx(12 / result["duration"])
    assert result["total_token_throughput"] == pytest.approx(
        (sum(result["input_lens"]) + 120) / result["duration"])
    tpots = [(lat - ttft) / (n - 1) for lat, ttft, n in
             zip(result["latencies"], result["ttfts"], result["output_lens"])]
    assert result["mean_tpot_ms"] == pytest.approx(1000 * sum(tpots) / len(tpots))
    assert INTERVAL * 1000 * 0.9 <= result["mean_tpot_ms"] <= INTERVAL * 1000 * 5
    assert result["itl_tpot_ratio"] == pytest.approx(1.0, rel=0.05)  # one token per chunk
    assert result["request_goodput"] == pytest.approx(result["request_throughput"])
    assert result["concurrency"] == pytest.approx(sum(result["latencies"]) / result["duration"])
    assert peak <= 4 and result["max_concurrency_observed"] <= 4
    for key in ("p50_ttft_ms", "p99_itl_ms", "std_e2el_ms", "median_tpot_ms"):
        assert key in result
    assert "ITL/TPOT (merge factor):" in printed and "Mean E2EL (ms):" in printed
    assert "Speculative Decoding" not in printed  # the server has no /debug/mtp_stats
    # The fake reports 1 prompt token per request: the tokenizer-mismatch warning must show.
    assert result["server_total_input_tokens"] == 12 and "WARNING: the server counts" in printed
    saved = read_result_json(tmp_path / "r.json")
    for key, value in result.items():
        if key != "result_path":
            assert saved[key] == value, key
    assert saved["args"]["request_rate"] == float("inf") and saved["args"]["max_concurrency"] == 4
    assert json.loads((tmp_path / "r.json").read_text())["request_rate"] == "inf"  # strict JSON
    records = json.loads(pytorch_format_path(tmp_path / "r.json").read_text())
    names = {r["metric"]["name"] for r in records}
    assert {"output_throughput", "mean_tpot_ms", "p99_ttft_ms"} <= names
    assert records[0]["model"]["name"] == "fake-model"


def test_goodput_zero_when_the_slo_is_missed(tokenizer_dir):
    with FakeServer("completions", Behavior(token_interval_s=INTERVAL)) as server:
        result = cli(_argv(server, tokenizer_dir, "--goodput", "tpot:0.5"))
    assert result["request_goodput"] == 0.0


def test_merge_factor_reveals_merged_chunks(tokenizer_dir):
    with FakeServer("completions", Behavior(token_interval_s=0.002, tokens_per_chunk=5)) as server:
        result = cli(_argv(server, tokenizer_dir))
    # 10 tokens in 2 chunks: one ITL sample spanning 5 tokens against TPOT spread over 9 gaps.
    assert result["itl_tpot_ratio"] == pytest.approx(9.0, rel=0.05)


def test_profile_and_spec_decode_stats(tokenizer_dir, capsys):
    with FakeServer("completions", Behavior(mtp_stats=True)) as server:
        result = cli(_argv(server, tokenizer_dir, "--profile"))
        control = list(server.record.control)
    assert control == ["start_profile", "stop_profile"]
    spec = result["spec_decode"]
    # 12 requests of 10 tokens: 5 forwards each, 2 drafts per forward, 5 accepted per request.
    assert spec["draft_tokens"] == 120 and spec["accepted_tokens"] == 60
    assert spec["acceptance_rate"] == pytest.approx(0.5)
    assert spec["accept_length"] == pytest.approx(2.0)
    out = capsys.readouterr().out
    assert "Acceptance Rate (%):" in out and "Accept Length" in out


@pytest.mark.parametrize("backend,protocol", [("openai-chat", "chat"), ("tgi", "tgi"),
                                              ("tensorrt-llm", "trt"), ("deepspeed-mii", "mii"),
                                              ("sglang", "completions")])
def test_each_backend_end_to_end(tokenizer_dir, backend, protocol):
    with FakeServer(protocol) as server:
        argv = _argv(server, tokenizer_dir)
        argv[1] = backend
        result = cli(argv + ["--num-prompts", "4"])
    assert result["completed"] == 4 and result["total_output_tokens"] == 40


def test_finite_request_rate_with_burstiness(tokenizer_dir):
    with FakeServer("completions") as server:
        result = cli(_argv(server, tokenizer_dir, "--request-rate", "200", "--burstiness", "0.5",
                           "--num-prompts", "8", "--dataset-name", "sonnet",
                           "--sonnet-input-len", "60", "--sonnet-prefix-len", "20",
                           "--sonnet-output-len", "6"))
    assert result["completed"] == 8 and result["request_rate"] == 200.0


def test_failed_server_stops_at_the_test_request(tokenizer_dir):
    with FakeServer("completions", Behavior(fail_status=503)) as server:
        with pytest.raises(RuntimeError, match="Initial test run failed"):
            cli(_argv(server, tokenizer_dir))


def test_endpoint_defaults_per_backend():
    assert resolve_urls(default_args(backend="tgi", host="h", port=1))[0] == "http://h:1/generate_stream"
    assert resolve_urls(default_args(backend="openai-chat", base_url="http://x/"))[0] == \
        "http://x/v1/chat/completions"
    assert resolve_urls(default_args(endpoint="/custom"))[0] == "http://127.0.0.1:8000/custom"


def test_cli_defaults_follow_the_spec_table():
    a = default_args()
    expected = {"backend": "vllm", "base_url": None, "host": "127.0.0.1", "port": 8000,
                "endpoint": "/v1/completions", "dataset_name": "sharegpt", "dataset_path": None,
                "num_prompts": 1000, "request_rate": float("inf"), "burstiness": 1.0,
                "max_concurrency": None, "ignore_eos": False, "save_result": False,
                "result_dir": None, "result_filename": None, "percentile_metrics": "ttft,tpot,itl",
                "metric_percentiles": "99", "goodput": None, "profile": False, "tokenizer": None,
                "seed": 0, "random_input_len": 1024, "random_output_len": 128,
                "random_range_ratio": 1.0, "random_prefix_len": 0, "use_chat_template": False}
    assert {k: getattr(a, k) for k in expected} == expected


def test_bench_config_names_are_cli_options():
    from dataclasses import fields

    from atom.config.bench import BenchConfig

    cli_names = set(vars(default_args()))
    own = {"launch_server", "reuse_server", "server_startup_timeout_s", "prompts_per_concurrency"}
    assert {f.name for f in fields(BenchConfig)} - own <= cli_names


def test_atom_run_job_bench_entry(tmp_path, tokenizer_dir):
    """`python -m atom.run job=bench ...` hands a validated Config to `atom.bench.run_bench`."""
    from atom.bench import run_bench
    from atom.config.compose import compose

    with FakeServer("completions") as server:
        cfg = compose(["job=bench", "model=tiny_llama", "load=dummy", f"bench.base_url={server.base_url}",
                       f"bench.tokenizer={tokenizer_dir}", "bench.num_prompts=3",
                       "bench.random_input_len=8", "bench.random_output_len=4", "bench.disable_tqdm=true",
                       f"output_dir={tmp_path}"])
        result = run_bench(cfg)
    assert result["completed"] == 3 and result["label"] == "vllm:tiny_llama"
    assert read_result_json(tmp_path / "result.json")["total_output_tokens"] == 12
