"""The per-forward context the kernels need: attention metadata and the KV cache of each layer.

The one global the codebase allows: set by the model runner around each forward (and each CUDA
graph capture), read by attention layers, so model code stays free of plumbing.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

import torch

from atom.kernels.backend import KernelBackend
from atom.kernels.metadata import AttentionMetadata


@dataclass
class ForwardContext:
    meta: AttentionMetadata
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (k_cache, v_cache)
    kv_scales: list[tuple[float, float]]
    # Under torch.compile: layer index → attention layer, for the atom::paged_attention op.
    attention_layers: Optional[Mapping[int, Any]] = None


_CTX: Optional[ForwardContext] = None
_BACKEND: Optional[KernelBackend] = None


def set_backend(backend: KernelBackend) -> None:
    global _BACKEND
    _BACKEND = backend


def backend() -> KernelBackend:
    if _BACKEND is None:
        from atom.kernels.backend import get_backend

        set_backend(get_backend("torch"))
    return _BACKEND  # type: ignore[return-value]


def current() -> Optional[ForwardContext]:
    return _CTX


@contextmanager
def forward_context(ctx: ForwardContext) -> Iterator[None]:
    global _CTX
    prev, _CTX = _CTX, ctx
    try:
        yield
    finally:
        _CTX = prev
