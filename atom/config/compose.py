"""Compose a Config from conf/ without a CLI and without leaving global Hydra state behind."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from atom.config.errors import ConfigError
from atom.config.hydra_errors import from_hydra, unknown_key
from atom.config.schema import Config, _profiler_dir_default
from atom.config.store import register_schema
from atom.config.validate import problems

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def unknown_keys(node: DictConfig, schema: Any, prefix: str = "") -> list[ConfigError]:
    """Keys the schema has no field for. Hydra lets `+group.key=value` add one to a structured
    config, and OmegaConf.to_object then drops it without a word: the setting would be ignored."""
    fields = {f.name: getattr(schema, f.name) for f in dataclasses.fields(schema)}
    errors = []
    for key in node.keys():
        path = f"{prefix}{key}"
        if key not in fields:
            if path != "hydra":
                value = OmegaConf.select(node, str(key), throw_on_resolution_failure=False)
                errors.append(unknown_key(path, fields, value))
        elif dataclasses.is_dataclass(fields[key]) and isinstance(node[key], DictConfig):
            errors += unknown_keys(node[key], fields[key], path + ".")
    return errors


def to_config(node: DictConfig, launching: bool = False) -> Config:
    """DictConfig (already typed by the schema) → Config object, env defaults filled, validated:
    unknown keys and every broken rule raised together. `launching`: see validate.problems."""
    errors = unknown_keys(node, Config())
    node = OmegaConf.masked_copy(node, [k for k in node.keys() if k != "hydra"]) if "hydra" in node else node
    cfg = OmegaConf.to_object(node)
    if not isinstance(cfg, Config):  # composed without the schema: type it now
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), node))
    if cfg.profiler.torch_profiler_dir is None:
        cfg.profiler.torch_profiler_dir = _profiler_dir_default()
    errors += problems(cfg, launching)
    if errors:
        raise ConfigError.all_of(errors)
    return cfg


def compose(overrides: Iterable[str] = (), config_name: str = "config",
            launching: bool = False) -> Config:
    """`atom.compose(["model=qwen3_0_6b", "kv_cache=fp8"])` → validated Config. A bad override
    (unknown group option or key, wrong type) is a ConfigError like a broken rule."""
    overrides = list(overrides)
    register_schema()
    backup = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="atom"):
            node = hydra_compose(config_name=config_name, overrides=overrides)
    except Exception as exc:
        err = from_hydra(exc, overrides)
        if err is None:
            raise
        raise err from exc
    finally:
        GlobalHydra.instance().clear()
        if backup is not None:
            GlobalHydra.instance().initialize(backup)
    return to_config(node, launching)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
