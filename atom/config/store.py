"""Registers the schema in Hydra's ConfigStore so every YAML under conf/ is type-checked."""
from __future__ import annotations

from hydra.core.config_store import ConfigStore

from atom.config.schema import Config

SCHEMA_NAME = "atom_schema"


def register_schema() -> None:
    """Idempotent: Hydra keeps one store per process and re-storing replaces the node."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)
