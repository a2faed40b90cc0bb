"""The spec's CLI flags (EngineArgs and the server's), each pointing at one Config field.

One source of truth: flag defaults are read from the Config dataclasses, never written here.
The same table serves argparse (`add_cli_args`), `LLMEngine(**kwargs)` and Hydra overrides.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from atom.config.compose import CONF_DIR, compose
from atom.config.help import group_doc, help_of
from atom.config.schema import Config


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]  # CLI spellings; the first is canonical
    path: str  # dotted Config field
    kind: str = "value"  # value | bool | negatable | list_int | optional_value
    syntax: str = ""  # how the flag itself is spelled, beyond the field's help (the schema's)

    @property
    def dest(self) -> str:
        return self.names[0].lstrip("-").replace("-", "_")


ENGINE_FLAGS: tuple[Flag, ...] = (
    Flag(("--model",), "model.path", syntax="or the name of a conf/model entry, which selects it"),
    Flag(("--tokenizer",), "model.tokenizer"),
    Flag(("--served-model-name",), "model.served_model_name"),
    Flag(("--dtype",), "model.dtype"),
    Flag(("--quantization", "-q"), "quant.method"),
    Flag(("--trust-remote-code",), "model.trust_remote_code", "bool"),
    Flag(("--tensor-parallel-size", "-tp"), "parallel.tensor_parallel_size"),
    Flag(("--data-parallel-size", "-dp"), "parallel.data_parallel_size"),
    Flag(("--enforce-eager",), "runtime.enforce_eager", "bool"),
    Flag(("--enable-prefix-caching",), "kv_cache.enable_prefix_caching", "bool"),
    Flag(("--enable-log-stats",), "runtime.enable_log_stats", "negatable"),
    Flag(("--throughput-log-interval",), "runtime.throughput_log_interval"),
    Flag(("--port",), "parallel.engine_port", syntax="the HTTP port is --server-port"),
    Flag(("--kv-cache-dtype",), "kv_cache.dtype"),
    Flag(("--block-size",), "kv_cache.block_size"),
    Flag(("--max-model-len",), "model.max_model_len"),
    Flag(("--max-num-batched-tokens",), "scheduler.max_num_batched_tokens"),
    Flag(("--max-num-seqs",), "scheduler.max_num_seqs"),
    Flag(("--gpu-memory-utilization",), "kv_cache.gpu_memory_utilization"),
    Flag(("--scheduler-delay-factor",), "scheduler.delay_factor"),
    Flag(("--scheduler-reserve-ratio",), "scheduler.reserve_ratio"),
    Flag(("--async-scheduling",), "scheduler.async_scheduling", "negatable"),
    Flag(("--cudagraph-capture-sizes",), "runtime.cudagraph_capture_sizes", "list_int"),
    Flag(("--level",), "runtime.level"),
    Flag(("--load-dummy",), "load.dummy", "optional_value", syntax="bare: empty"),
    Flag(("--enable-expert-parallel",), "parallel.enable_expert_parallel", "bool"),
    Flag(("--enable-dp-attention",), "parallel.enable_dp_attention", "bool"),
    Flag(("--torch-profiler-dir",), "profiler.torch_profiler_dir"),
    Flag(("--mark-trace",), "profiler.mark_trace", "bool"),
    Flag(("--method",), "specdecode.method"),
    Flag(("--num-speculative-tokens",), "specdecode.num_speculative_tokens"),
    Flag(("--draft-model",), "specdecode.draft_model"),
    Flag(("--spec-decode-acceptance-length",), "specdecode.acceptance_length"),
    Flag(("--spec-decode-acceptance-rate",), "specdecode.acceptance_rate"),
    Flag(("--prompt-lookup-min",), "specdecode.prompt_lookup_min"),
    Flag(("--prompt-lookup-max",), "specdecode.prompt_lookup_max"),
    Flag(("--kernels",), "runtime.kernels"),
    Flag(("--device",), "runtime.device"),
    Flag(("--cpu-threads",), "runtime.cpu_threads"),
    Flag(("--seed",), "runtime.seed"),
)

SERVER_FLAGS: tuple[Flag, ...] = (
    Flag(("--host",), "server.host"),
    Flag(("--server-port",), "server.port"),
    Flag(("--timeout-keep-alive",), "server.timeout_keep_alive"),
    Flag(("--disable-uvicorn-access-log",), "server.disable_uvicorn_access_log", "bool"),
    Flag(("--tool-call-parser",), "format.tool_call_parser"),
    Flag(("--reasoning-parser",), "format.reasoning_dialect"),
    Flag(("--chat-template",), "format.chat_template"),
    Flag(("--api-key",), "server.api_key"),
    Flag(("--engine-source",), "server.engine_source"),
    Flag(("--synthetic-tokens-per-s",), "server.synthetic_tokens_per_s"),
)

# LLMEngine(**kwargs) names (the spec's Config field names) that differ from a flag's dest.
KWARG_ALIASES = {"kv_cache_dtype": "kv_cache.dtype", "enable_prefix_caching": "kv_cache.enable_prefix_caching",
                 "scheduler_delay_factor": "scheduler.delay_factor", "load_dummy": "load.dummy",
                 "num_kvcache_blocks": "kv_cache.num_blocks", "kv_cache_num_blocks": "kv_cache.num_blocks",
                 "cpu_kv_cache_bytes": "kv_cache.cpu_cache_bytes", "compilation_level": "runtime.level"}


def _get(cfg: Config, path: str) -> Any:
    obj: Any = cfg
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _spellings(name: str) -> list[str]:
    """Both kebab and snake spellings of a long flag (the spec mixes them)."""
    if name.startswith("--"):
        body = name[2:]
        return sorted({"--" + body.replace("_", "-"), "--" + body.replace("-", "_")})
    return [name]


def add_cli_args(parser: argparse.ArgumentParser, flags: Iterable[Flag] = ENGINE_FLAGS) -> None:
    """Register flags with defaults of None (= "use the Config default"), so an unset flag
    never shadows the tree's default or an override."""
    defaults = Config()
    groups: dict[str, Any] = {}
    for f in flags:
        names = [s for n in f.names for s in _spellings(n)]
        default = _get(defaults, f.path)
        helptext = flag_help(f, help_of(f.path), default)
        group = f.path.split(".", 1)[0]  # one --help section per config group, as vllm's
        if group not in groups:
            groups[group] = parser.add_argument_group(group, group_doc(group))
        add = groups[group].add_argument
        if f.kind == "bool":
            add(*names, dest=f.dest, action="store_const", const=True, default=None, help=helptext)
        elif f.kind == "negatable":
            add(*names, dest=f.dest, action=argparse.BooleanOptionalAction, default=None,
                help=helptext)
        elif f.kind == "list_int":
            add(*names, dest=f.dest, type=int, nargs="+", default=None, help=helptext)
        elif f.kind == "optional_value":
            add(*names, dest=f.dest, nargs="?", const="empty", default=None, help=helptext)
        else:
            add(*names, dest=f.dest, default=None, help=helptext)


def flag_help(f: Flag, field_help: str, default: Any) -> str:
    """The field's help (the schema's comment), the flag's own syntax, its default and field.
    `%` is doubled: argparse formats help with it."""
    text = "; ".join(t for t in (field_help, f.syntax) if t)
    return f"{text} (default: {default!r}; config: {f.path})".replace("%", "%%")


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    s = str(value)
    return s if all(c not in s for c in " ,=[]{}'\"") else "'" + s.replace("'", "\\'") + "'"


def model_overrides(model: Optional[str]) -> list[str]:
    """`--model X`: a conf/model entry name selects that group; anything else is a path."""
    if model is None:
        return []
    if (CONF_DIR / "model" / f"{model}.yaml").exists():
        return [f"model={model}"]
    return ["model=local", f"model.path={_fmt(model)}"]


def overrides_from_values(values: dict[str, Any], flags: Iterable[Flag]) -> list[str]:
    """Hydra override strings for every flag that was given a value."""
    out: list[str] = []
    for f in flags:
        if f.path == "model.path":
            continue
        v = values.get(f.dest)
        if v is not None:
            out.append(f"{f.path}={_fmt(v)}")
    return out


def overrides_from_args(args: argparse.Namespace, flags: Iterable[Flag]) -> list[str]:
    values = vars(args)
    return model_overrides(values.get("model")) + overrides_from_values(values, flags)


def config_from_args(args: argparse.Namespace, flags: Iterable[Flag] = ENGINE_FLAGS,
                     extra: Iterable[str] = (), launching: bool = False) -> Config:
    """`launching`: the config is about to run (validate.problems)."""
    return compose(overrides_from_args(args, flags) + list(extra), launching=launching)


def config_from_kwargs(model: Optional[str] = None, **kwargs: Any) -> Config:
    """`LLMEngine(model=..., kv_cache_dtype="fp8", ...)`: Config field names or flag dests."""
    by_dest = {f.dest: f.path for f in ENGINE_FLAGS + SERVER_FLAGS}
    by_dest.update(KWARG_ALIASES)
    overrides = model_overrides(model)
    for key, value in kwargs.items():
        path = by_dest.get(key) or (key if "." in key else None)
        if path is None:
            raise TypeError(f"LLMEngine got an unknown argument {key!r}")
        overrides.append(f"{path}={_fmt(value)}")
    return compose(overrides)
