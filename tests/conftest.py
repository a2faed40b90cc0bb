"""Shared fixtures: tiny random checkpoints made with transformers (the oracle), and the embedded
default model."""
from __future__ import annotations

import os

import pytest

# OpenMP threads that outnumber free cores spin; tests share 2 cores with servers they start.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
