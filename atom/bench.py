"""Benchmark sweeps on Hydra: `python -m atom.bench -m bench.max_concurrency=1,8,64 ...`.

One job per sweep point runs the serving benchmark described by `cfg.bench` and writes, into
that job's output directory, `result.json` (+ `result.pytorch.json`) and `config.yaml` (the
resolved config the point ran with). `python -m atom.benchmarks.plots <sweep dir>` then draws the
throughput/latency frontier. `+experiment=<name>` loads a checked-in workload from
conf/experiment/.

The client does not need the server's model files, so when the root config fails validation
outside the `bench` section (a model this machine cannot load, say), the run goes on with that
section unvalidated — it is recorded, not used.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

import hydra
from omegaconf import DictConfig, OmegaConf

from atom.benchmarks import server_launcher
from atom.benchmarks.benchmark_serving import default_args
from atom.benchmarks.benchmark_serving import main as run_benchmark
from atom.benchmarks.server_launcher import server_overrides
from atom.config.compose import CONF_DIR, to_config
from atom.config.errors import ConfigError
from atom.config.help import help_asked, run_help
from atom.config.report import config_errors_exit
from atom.config.store import register_schema
from atom.log_setup import configure_logging

logger = logging.getLogger(__name__)


def _typed(node: DictConfig) -> Any:
    """Config object for `node`: validated when possible, else as typed by the schema."""
    try:
        return to_config(node)
    except ConfigError as err:
        if any(e.field.startswith("bench.") for e in err.errors):
            raise
        reason = str(err).replace("\n", "; ")
    except ImportError as err:  # a validation rule whose module is not built yet
        reason = f"validation unavailable ({err})"
    logger.warning("server-side config not validated (the benchmark client does not use it): %s", reason)
    plain = OmegaConf.masked_copy(node, [k for k in node.keys() if k != "hydra"]) if "hydra" in node else node
    return OmegaConf.to_object(plain)


def _model_name(cfg: Any) -> str:
    return cfg.bench.model or cfg.model.served_model_name or cfg.model.name


def _tokenizer_path(cfg: Any) -> str:
    """Like the CLI, fall back to the model: its tokenizer, its path, then its name (a conf/model
    entry: benchmarks.tokenizer_source resolves it as the server would)."""
    return cfg.bench.tokenizer or cfg.model.tokenizer or cfg.model.path or _model_name(cfg)


def _num_prompts(b: dict[str, Any]) -> int:
    per = b.pop("prompts_per_concurrency")
    if per is None:
        return b["num_prompts"]
    if not b["max_concurrency"]:
        raise ValueError("bench.prompts_per_concurrency needs bench.max_concurrency")
    return int(per) * int(b["max_concurrency"])


def bench_args(cfg: Any, output_dir: Optional[Path]) -> argparse.Namespace:
    """`cfg.bench` as benchmark_serving's argparse namespace (same names, lists joined)."""
    b = OmegaConf.to_container(OmegaConf.structured(cfg.bench), resolve=True)
    for key in ("launch_server", "reuse_server", "server_startup_timeout_s"):  # atom.bench's only
        b.pop(key)
    b["model"] = _model_name(cfg)
    b["tokenizer"] = _tokenizer_path(cfg)
    b["num_prompts"] = _num_prompts(b)
    b["percentile_metrics"] = ",".join(b["percentile_metrics"])
    b["metric_percentiles"] = ",".join(f"{p:g}" for p in b["metric_percentiles"])
    b["goodput"] = [f"{k}:{v:g}" for k, v in b["goodput"].items()] if b["goodput"] else None
    b["metadata"] = [f"{k}={v}" for k, v in b["metadata"].items()]
    if b["result_dir"] is None and output_dir is not None:
        b["result_dir"] = str(output_dir)
    return default_args(**b)


def default_label(args: argparse.Namespace, overrides: list[str]) -> str:
    """backend:model plus the point's server-side overrides, so a sweep over engine configs
    (`kv_cache=bf16,fp8`) draws one line per config rather than one zig-zag line."""
    server = " ".join(server_overrides(overrides))
    return f"{args.backend}:{args.served_model_name or args.model}" + (f" {server}" if server else "")


def _run(cfg: Any, output_dir: Optional[Path], overrides: list[str]) -> dict[str, Any]:
    args = bench_args(cfg, output_dir)
    args.label = args.label or default_label(args, overrides)
    args.metadata = (args.metadata or []) + [f"override.{i}={o}" for i, o in enumerate(overrides)]
    if not cfg.bench.launch_server:
        return run_benchmark(args)
    log_path = (output_dir or Path(".")) / "server.log"
    if not cfg.bench.reuse_server:
        with server_launcher.launched_server(overrides, log_path, cfg.bench.server_startup_timeout_s) as url:
            args.base_url = url
            return run_benchmark(args)
    args.base_url = server_launcher.shared_server(overrides, log_path, cfg.bench.server_startup_timeout_s)
    return run_benchmark(args)


def run_point(node: DictConfig, output_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """Run one sweep point and leave its result and resolved config in `output_dir`."""
    cfg = _typed(node)
    output_dir.mkdir(parents=True, exist_ok=True)
    plain = OmegaConf.masked_copy(node, [k for k in node.keys() if k != "hydra"])
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(plain, resolve=True), encoding="utf-8")
    return _run(cfg, output_dir, overrides)


def _task_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def run_bench(cfg: Any) -> dict[str, Any]:
    """`python -m atom.run job=bench ...`: one benchmark from an already validated Config (atom.run
    has written its config.yaml); the result lands in `cfg.output_dir`."""
    output_dir = Path(cfg.output_dir) if cfg.output_dir else None
    return _run(cfg, output_dir, _task_overrides())


def _job(node: DictConfig) -> Optional[float]:
    """Hydra task function. Returns output tok/s so an optimizing sweeper can maximise it."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    result = run_point(node, Path(hc.runtime.output_dir), list(hc.overrides.task))
    return result.get("output_throughput")


def main() -> None:
    overrides = [a for a in sys.argv[1:] if not a.startswith("-")]
    if help_asked(sys.argv[1:]):
        with config_errors_exit(overrides):
            print(run_help(overrides, "python -m atom.bench", __doc__.split("\n\n")[0]))
        return
    configure_logging()
    register_schema()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # composition errors reach config_errors_exit (atom.run)
    with config_errors_exit(overrides):
        hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_job)()


if __name__ == "__main__":
    main()
