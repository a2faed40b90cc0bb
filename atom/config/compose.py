"""Compose a Config from conf/ without a CLI and without leaving global Hydra state behind."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from atom.config.schema import Config, _profiler_dir_default
from atom.config.store import register_schema
from atom.config.validate import validate

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def to_config(node: DictConfig) -> Config:
    """DictConfig (already typed by the schema) → Config object, env defaults filled, validated."""
    node = OmegaConf.masked_copy(node, [k for k in node.keys() if k != "hydra"]) if "hydra" in node else node
    cfg = OmegaConf.to_object(node)
    if not isinstance(cfg, Config):  # composed without the schema: type it now
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), node))
    if cfg.profiler.torch_profiler_dir is None:
        cfg.profiler.torch_profiler_dir = _profiler_dir_default()
    return validate(cfg)


def compose(overrides: Iterable[str] = (), config_name: str = "config") -> Config:
    """`atom.compose(["model=qwen3_0_6b", "kv_cache=fp8"])` → validated Config."""
    register_schema()
    backup = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="atom"):
            node = hydra_compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()
        if backup is not None:
            GlobalHydra.instance().initialize(backup)
    return to_config(node)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
