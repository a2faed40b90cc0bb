"""`python -m atom.run [overrides]`: the Hydra entry point. Serves by default; `job=` picks
another job (generate, throughput, bench). `--cfg job` prints the resolved tree; `-m` sweeps.
Each run writes its resolved config (`config.yaml`) into its output directory."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from atom.config.compose import CONF_DIR, to_config, to_yaml
from atom.config.errors import ConfigError
from atom.config.schema import Config
from atom.config.store import register_schema

log = logging.getLogger("atom")


def _output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def run_job(cfg: Config) -> object:
    if cfg.job == "serve":
        from atom.entrypoints.openai.api_server import serve

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
    try:
        cfg = to_config(node)
        out = _output_dir()
        cfg.output_dir = cfg.output_dir or str(out)
        (out / "config.yaml").write_text(to_yaml(cfg))
        return run_job(cfg)
    except ConfigError as e:  # from validation, or from a builder refusing before any weights load
        print(f"atom: {e}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_schema()
    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_main)()


if __name__ == "__main__":
    main()
