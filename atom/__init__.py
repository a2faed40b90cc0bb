"""atom: an LLM inference engine and OpenAI-compatible server; one validated Config per run.

Every `import atom.<module>` runs this file first, so it imports nothing heavy: Hydra (compose),
the builder and torch (LLMEngine) are imported when first called for."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atom.sampling_params import SamplingParams

if TYPE_CHECKING:
    from atom.config.schema import Config
    from atom.llm_engine import LLMEngine

__all__ = ["LLMEngine", "SamplingParams", "build_engine", "compose"]


def compose(overrides: list[str] | tuple[str, ...] = ()) -> "Config":
    from atom.config.compose import compose as _compose

    return _compose(overrides)


def build_engine(cfg: "Config") -> "LLMEngine":
    from atom.llm_engine import build_engine as _build

    return _build(cfg)


def __getattr__(name: str) -> Any:  # LLMEngine imports torch: only when asked for
    if name == "LLMEngine":
        from atom.llm_engine import LLMEngine

        return LLMEngine
    raise AttributeError(name)
