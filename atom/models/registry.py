"""Architecture name (HF `architectures[0]`) → model class; the names and their class paths are
atom/config/model_facts.py's, which validation reads before any model module is imported."""
from __future__ import annotations

import importlib

from atom.config.model_facts import ARCHITECTURES, check_architecture


def model_class(name: str) -> type:
    check_architecture(name)
    module, cls = ARCHITECTURES[name].split(":")
    return getattr(importlib.import_module(module), cls)
