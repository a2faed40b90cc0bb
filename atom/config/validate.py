"""Cross-field rules, checked before anything heavy (no weights are read here).

Each rule raises ConfigError naming the field, the value and the rule.
"""
from __future__ import annotations

import importlib.util
import os

from atom.config.errors import ConfigError
from atom.config.schema import Config

KV_DTYPES = ("bf16", "fp8")
KERNEL_BACKENDS = ("auto", "torch", "cpu", "triton", "aiter")
DEVICES = ("auto", "cpu", "cuda")
DUMMY_KINDS = (None, "empty", "zero", "xavier")
LOAD_FORMATS = ("auto", "safetensors", "gguf")
SPEC_METHODS = (None, "mtp", "eagle3")
JOBS = ("serve", "generate", "throughput", "bench")
ENGINE_SOURCES = ("model", "synthetic", "scripted")


def _check(ok: bool, field: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(field, value, rule)


def _one_of(field: str, value: object, allowed: tuple) -> None:
    _check(value in allowed, field, value, f"must be one of {', '.join(map(str, allowed))}")


def validate(cfg: Config) -> Config:
    """Check every rule that needs no weights; return cfg for chaining."""
    _one_of("job", cfg.job, JOBS)
    _validate_kv(cfg)
    _validate_scheduler(cfg)
    _validate_runtime(cfg)
    _validate_load_and_model(cfg)
    _validate_parallel(cfg)
    _validate_specdecode(cfg)
    _validate_server(cfg)
    _validate_format(cfg)
    return cfg


def _validate_kv(cfg: Config) -> None:
    kv = cfg.kv_cache
    _one_of("kv_cache.dtype", kv.dtype, KV_DTYPES)
    _check(kv.block_size > 0 and kv.block_size & (kv.block_size - 1) == 0,
           "kv_cache.block_size", kv.block_size, "must be a positive power of two")
    _check(0.0 < kv.gpu_memory_utilization <= 1.0, "kv_cache.gpu_memory_utilization",
           kv.gpu_memory_utilization, "must be in (0, 1]")
    _check(kv.cpu_cache_bytes > 0, "kv_cache.cpu_cache_bytes", kv.cpu_cache_bytes, "must be > 0")
    _check(kv.num_blocks is None or kv.num_blocks > 0, "kv_cache.num_blocks", kv.num_blocks,
           "must be > 0 when set")


def _validate_scheduler(cfg: Config) -> None:
    s = cfg.scheduler
    _check(s.max_num_seqs >= 1, "scheduler.max_num_seqs", s.max_num_seqs, "must be >= 1")
    _check(s.max_num_batched_tokens >= cfg.kv_cache.block_size, "scheduler.max_num_batched_tokens",
           s.max_num_batched_tokens, f"must be >= kv_cache.block_size ({cfg.kv_cache.block_size})")
    _check(s.delay_factor >= 0.0, "scheduler.delay_factor", s.delay_factor, "must be >= 0")
    _check(0.0 <= s.reserve_ratio <= 1.0, "scheduler.reserve_ratio", s.reserve_ratio, "must be in [0, 1]")


def _validate_runtime(cfg: Config) -> None:
    r = cfg.runtime
    _one_of("runtime.device", r.device, DEVICES)
    _one_of("runtime.kernels", r.kernels, KERNEL_BACKENDS)
    _check(0 <= r.level <= 3, "runtime.level", r.level, "compilation level must be in 0..3")
    _check(all(b >= 1 for b in r.cudagraph_capture_sizes), "runtime.cudagraph_capture_sizes",
           r.cudagraph_capture_sizes, "every size must be >= 1")
    _check(r.throughput_log_interval > 0, "runtime.throughput_log_interval",
           r.throughput_log_interval, "must be > 0")
    if r.kernels == "aiter":
        _check(importlib.util.find_spec("aiter") is not None, "runtime.kernels", r.kernels,
               "aiter backend needs ROCm (the amd-aiter package is not importable here)")


def _validate_load_and_model(cfg: Config) -> None:
    _one_of("load.dummy", cfg.load.dummy, DUMMY_KINDS)
    _one_of("load.format", cfg.load.format, LOAD_FORMATS)
    m = cfg.model
    _check(m.max_model_len is None or m.max_model_len > 0, "model.max_model_len",
           m.max_model_len, "must be > 0 when set")
    _one_of("model.dtype", m.dtype, ("auto", "bfloat16", "float16", "float32"))
    if m.path is not None and cfg.load.dummy is None:
        _check(os.path.exists(m.path), "model.path", m.path, "path does not exist")
    if m.path is None and not m.hf_config and m.pypi_wheel is None:
        raise ConfigError("model.path", None, "a model needs a path, an hf_config (with load.dummy) "
                          "or an embedded source")
    if m.path is None and m.hf_config and cfg.load.dummy is None:
        raise ConfigError("load.dummy", None, "a model given only as hf_config needs load.dummy "
                          "(empty, zero or xavier): there is no checkpoint to read")


def _validate_parallel(cfg: Config) -> None:
    p = cfg.parallel
    _check(p.tensor_parallel_size >= 1, "parallel.tensor_parallel_size", p.tensor_parallel_size,
           "must be >= 1")
    _check(p.data_parallel_size >= 1, "parallel.data_parallel_size", p.data_parallel_size,
           "must be >= 1")
    _check(1 <= p.engine_port <= 65535, "parallel.engine_port", p.engine_port, "must be a TCP port")
    from atom.models.hf_config import read_architecture_shape  # reads config.json / GGUF header only

    shape = read_architecture_shape(cfg)
    if shape is None:
        return
    from atom.models.registry import check_architecture

    check_architecture(shape.architecture)
    tp = p.tensor_parallel_size
    _check(shape.num_attention_heads % tp == 0, "parallel.tensor_parallel_size", tp,
           f"must divide the number of attention heads ({shape.num_attention_heads})")
    _check(shape.num_key_value_heads % tp == 0, "parallel.tensor_parallel_size", tp,
           f"must divide the number of KV heads ({shape.num_key_value_heads})")


def _validate_specdecode(cfg: Config) -> None:
    s = cfg.specdecode
    _one_of("specdecode.method", s.method, SPEC_METHODS)
    _check(s.num_speculative_tokens >= 1, "specdecode.num_speculative_tokens",
           s.num_speculative_tokens, "must be >= 1")
    if s.method == "eagle3":
        _check(s.draft_model is not None, "specdecode.draft_model", s.draft_model,
               "a draft model is required for method eagle3")
    _check(s.acceptance_length is None or s.acceptance_rate is None,
           "specdecode.acceptance_length", s.acceptance_length,
           "acceptance_length and acceptance_rate are mutually exclusive")
    k = s.num_speculative_tokens
    if s.acceptance_length is not None:
        _check(1.0 <= s.acceptance_length <= k + 1, "specdecode.acceptance_length",
               s.acceptance_length, f"must be in [1, num_speculative_tokens + 1] = [1, {k + 1}]")
    if s.acceptance_rate is not None:
        _check(0.0 <= s.acceptance_rate <= 1.0, "specdecode.acceptance_rate", s.acceptance_rate,
               "must be in [0, 1]")


def _validate_server(cfg: Config) -> None:
    s = cfg.server
    _check(1 <= s.port <= 65535, "server.port", s.port, "must be a TCP port")
    _check(s.timeout_keep_alive >= 0, "server.timeout_keep_alive", s.timeout_keep_alive, "must be >= 0")
    _one_of("server.engine_source", s.engine_source, ENGINE_SOURCES)
    if s.engine_source == "scripted":
        _check(s.script_text is not None, "server.script_text", s.script_text,
               "engine_source=scripted needs the text to replay")


def _validate_format(cfg: Config) -> None:
    from atom.config.format import TOOL_CALL_PARSERS, REASONING_DIALECTS

    _one_of("format.tool_call_parser", cfg.format.tool_call_parser, TOOL_CALL_PARSERS)
    _one_of("format.reasoning_dialect", cfg.format.reasoning_dialect, REASONING_DIALECTS)
    if cfg.format.chat_template is not None:
        _check(os.path.exists(cfg.format.chat_template), "format.chat_template",
               cfg.format.chat_template, "file does not exist")
