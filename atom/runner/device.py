"""The device and the activation dtype a config resolves to (`auto`: CUDA when there is one)."""
from __future__ import annotations

import torch

from atom.config.schema import Config

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(cfg: Config) -> torch.device:
    if cfg.runtime.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.runtime.device)


def resolve_dtype(cfg: Config, device: torch.device) -> torch.dtype:
    """`auto`: bfloat16 on a GPU, float32 on a CPU (where the transformers oracle is matched)."""
    if cfg.model.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[cfg.model.dtype]
