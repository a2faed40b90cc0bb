"""The launcher accepts the spec's engine and server flags (kebab and snake) onto the Config fields
`python -m atom.run` overrides."""
from __future__ import annotations

from atom.config.flags import ENGINE_FLAGS, SERVER_FLAGS, add_cli_args
from atom.entrypoints.openai_server import build_parser, config_from_argv


def test_spec_flags_parse_in_both_spellings():
    p = build_parser()
    a = p.parse_args(["--model", "m", "--kv_cache_dtype", "fp8", "-tp", "8", "--host", "h",
                      "--server-port", "9000", "--timeout-keep-alive", "7", "--disable-uvicorn-access-log",
                      "--tool-call-parser", "qwen", "--enable_prefix_caching", "--port", "8010",
                      "--no-enable-log-stats", "--throughput-log-interval", "3", "--api-key", "k"])
    assert (a.kv_cache_dtype, a.tensor_parallel_size, a.server_port, a.port) == ("fp8", "8", "9000", "8010")
    assert a.disable_uvicorn_access_log and a.enable_prefix_caching and a.enable_log_stats is False
    b = p.parse_args(["--kv-cache-dtype", "fp8", "--server_port", "9001", "--timeout_keep_alive", "3"])
    assert (b.kv_cache_dtype, b.server_port, b.timeout_keep_alive) == ("fp8", "9001", "3")


def test_every_spec_flag_is_registered():
    import argparse

    p = argparse.ArgumentParser()
    add_cli_args(p, ENGINE_FLAGS + SERVER_FLAGS)
    known = {s for a in p._actions for s in a.option_strings}
    spec = ["--model", "--trust-remote-code", "--tensor-parallel-size", "-tp", "--data-parallel-size", "-dp",
            "--enforce-eager", "--enable_prefix_caching", "--enable-log-stats", "--no-enable-log-stats",
            "--throughput-log-interval", "--port", "--kv_cache_dtype", "--block-size", "--max-model-len",
            "--max-num-batched-tokens", "--max-num-seqs", "--gpu-memory-utilization",
            "--scheduler-delay-factor", "--cudagraph-capture-sizes", "--level", "--load_dummy",
            "--enable-expert-parallel", "--enable-dp-attention", "--torch-profiler-dir", "--method",
            "--num-speculative-tokens", "--host", "--server-port", "--timeout-keep-alive",
            "--disable-uvicorn-access-log", "--tool-call-parser"]
    assert not [f for f in spec if f not in known]


def test_flags_map_onto_config_fields():
    cfg = config_from_argv(["--model", "tiny_llama", "--load-dummy", "--host", "127.0.0.1",
                            "--server-port", "8123", "--timeout-keep-alive", "9",
                            "--disable-uvicorn-access-log", "--api-key", "secret", "--engine-source",
                            "synthetic", "--kv_cache_dtype", "fp8", "server.synthetic_tokens_per_s=7"])
    s = cfg.server
    assert (s.host, s.port, s.timeout_keep_alive, s.disable_uvicorn_access_log, s.api_key) == (
        "127.0.0.1", 8123, 9, True, "secret")
    assert s.engine_source == "synthetic" and s.synthetic_tokens_per_s == 7 and cfg.kv_cache.dtype == "fp8"
    assert cfg.model.name == "tiny_llama"
    default = config_from_argv(["--model", "tiny_llama", "--load-dummy"])
    assert (default.server.host, default.server.port, default.server.timeout_keep_alive) == ("0.0.0.0", 8000, 5)
