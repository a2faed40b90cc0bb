"""`EngineArgs`: the spec's CLI for scripts, a thin view over the flag table in atom.config.flags
(which maps every flag onto a Config field; defaults live only in the Config dataclasses)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from atom.llm_engine import build_engine
from atom.config.flags import ENGINE_FLAGS, add_cli_args, config_from_args

if TYPE_CHECKING:
    from atom.config.schema import Config
    from atom.llm_engine import LLMEngine


@dataclass
class EngineArgs:
    args: argparse.Namespace
    overrides: list[str] = field(default_factory=list)  # extra Hydra overrides

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        add_cli_args(parser, ENGINE_FLAGS)
        parser.add_argument("overrides", nargs="*", default=[],
                            help="Hydra overrides, e.g. kv_cache.num_blocks=512")
        return parser

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "EngineArgs":
        return cls(args, list(getattr(args, "overrides", []) or []))

    def create_config(self) -> "Config":
        """Validated as about to run: what the engine cannot run yet is refused with the rest."""
        return config_from_args(self.args, ENGINE_FLAGS, self.overrides, launching=True)

    def create_engine(self) -> "LLMEngine":
        return build_engine(self.create_config())
