"""HF safetensors checkpoints: one file, or shards listed by model.safetensors.index.json."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from safetensors import safe_open


def checkpoint_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / n for n in names]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {folder}")
    return files


def count_tensors(files: list[Path]) -> int:
    n = 0
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            n += len(list(h.keys()))
    return n


def iter_safetensors(files: list[Path], skip: Optional[Callable[[str], bool]] = None
                     ) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor but those `skip` names (weights.weight_skip: DeepSeek-R1's MTP layer, 14B
    of its 685B parameters; other ranks' experts), which are never read from disk."""
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for name in h.keys():
                if skip is None or not skip(name):
                    yield name, h.get_tensor(name)
