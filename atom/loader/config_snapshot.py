"""What a transformers config class made of a model's config, kept between starts.

Building any transformers config class imports `transformers` (1.9 s on the H200 host) and,
through the class's `@auto_docstring` decorator, `transformers.models`, whose lazy module reads
every model directory to build its import table (3.0 s there, on every start): half of a 10 s
engine start, for a handful of numbers. The first start builds the real class and saves the
attributes it produced (`to_dict()`: every default and derived value, e.g. `head_dim`,
`rope_parameters`); later starts read them back without importing transformers. Entries are
keyed by the inputs, the model type and the installed transformers version, so a release that
changes a default gets its own entry; a config that does not survive JSON is never cached.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("atom.models")


class ConfigSnapshot:
    """A transformers config's attributes, read as attributes (a missing one raises
    AttributeError, so `getattr(hf, name, default)` behaves as on the real class)."""

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.__dict__.update(attrs)
        if isinstance(attrs.get("id2label"), dict):  # JSON made its int keys strings, which
            self.id2label = {int(k): v for k, v in attrs["id2label"].items()}  # from_dict undoes

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    def get_text_config(self, *args: Any, **kwargs: Any) -> "ConfigSnapshot":
        return self

    def __repr__(self) -> str:
        return f"ConfigSnapshot({self.__dict__.get('model_type')!r})"


def _attributes(real: Any) -> dict[str, Any]:
    """What reading the real config gives: its stored values, and the class's properties and
    aliases (`rope_scaling` is a property of transformers 5's configs, `num_local_experts` an
    alias of DeepSeek-V3's `n_routed_experts`). A value JSON cannot hold keeps its `to_dict`
    form (a torch dtype as its name)."""
    stored = real.to_dict()
    cls = type(real)
    names = set(stored) | set(getattr(cls, "attribute_map", {}) or {})
    names |= {n for n in dir(cls) if not n.startswith("_") and isinstance(getattr(cls, n), property)}
    out: dict[str, Any] = {}
    for name in sorted(names):
        try:
            value = getattr(real, name)
            json.dumps(value)
        except (AttributeError, TypeError, ValueError, NotImplementedError):
            if name not in stored:
                continue
            value = stored[name]
        out[name] = value
    return out


def _transformers_version() -> str:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "none"


def snapshot_key(inputs: dict[str, Any]) -> str:
    blob = json.dumps({"inputs": inputs, "transformers": _transformers_version()},
                      sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cached_config(inputs: dict[str, Any], build: Callable[[], Any], folder: Path) -> Any:
    """The snapshot of what `build()` makes of `inputs` (everything the config was built from):
    read from `folder`, or built and saved there. The first start gets a snapshot too, so every
    start sees the same kind of object; a config JSON cannot hold comes back as built."""
    path = folder / f"{snapshot_key(inputs)}.json"
    try:
        return ConfigSnapshot(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    real = build()
    try:
        text = json.dumps(_attributes(real), sort_keys=True)
    except (TypeError, ValueError):
        return real
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)  # concurrent first starts each write a whole file
    except OSError as exc:
        log.debug("config snapshot not saved (%s): %s", path, exc)
    return ConfigSnapshot(json.loads(text))
