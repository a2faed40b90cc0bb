"""`python -m atom.run [overrides]`: the Hydra entry point. Serves by default; `job=` picks
another job (generate, throughput, bench). `--cfg job` prints the resolved tree; `-m` sweeps;
`--help` describes every field. Nothing is written into the working directory unless asked:
`output_dir=DIR` keeps the resolved config (`config.yaml`) and a job's results there, and each
point of a `-m` sweep gets its own directory under `hydra.sweep.dir`."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import hydra
from omegaconf import DictConfig

from atom.config.compose import CONF_DIR, to_config, to_yaml
from atom.config.errors import ConfigError
from atom.config.help import help_asked, run_help
from atom.config.hosts import resolve_hosts
from atom.config.report import config_errors_exit
from atom.config.schema import Config
from atom.config.store import register_schema
from atom.log_setup import configure_logging


def _sweep_dir() -> Optional[Path]:
    """A `-m` sweep point's own directory; None for a single run (which writes nowhere)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    return Path(hc.runtime.output_dir) if hc.mode == RunMode.MULTIRUN else None


def run_job(cfg: Config) -> object:
    if resolve_hosts(cfg.parallel, os.environ).node_rank > 0:  # another host: ranks, no job
        from atom.builder import run_headless_node

        code = run_headless_node(cfg)
        if code:
            raise SystemExit(code)
        return None
    # Each job's module is imported when that job runs: the server pulls in uvicorn, Litestar and
    # ZMQ, generate and throughput torch and transformers, bench the HTTP client; `--help` and
    # `--cfg job` need none of them.
    if cfg.job == "serve":
        from atom.entrypoints.api_server import serve

        return serve(cfg)
    if cfg.job == "generate":
        from atom.examples.simple_inference import run as generate

        return generate(cfg)
    if cfg.job == "throughput":
        from atom.benchmarks.throughput import run as throughput

        return throughput(cfg)
    if cfg.job == "bench":
        from atom.bench import run_bench

        return run_bench(cfg)
    raise ConfigError("job", cfg.job, "unknown job")


def _main(node: DictConfig) -> object:
    with config_errors_exit():  # validation, or a builder refusing before any weights load
        cfg = to_config(node, launching=True)
        out = Path(cfg.output_dir) if cfg.output_dir else _sweep_dir()
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            cfg.output_dir = str(out)
            (out / "config.yaml").write_text(to_yaml(cfg))
        return run_job(cfg)


def _overrides(argv: list[str]) -> list[str]:
    return [a for a in argv if not a.startswith("-")]


def main() -> None:
    argv = sys.argv[1:]
    if help_asked(argv):
        with config_errors_exit(_overrides(argv)):
            print(run_help(_overrides(argv)))
        return
    configure_logging()
    register_schema()
    # Hydra re-raises composition errors instead of printing its own multi-line message and
    # exiting 1, so they are reported like any other bad config.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    with config_errors_exit(_overrides(argv)):
        hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_main)()


if __name__ == "__main__":
    main()
