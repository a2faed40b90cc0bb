"""The per-forward context the attention layers need: this step's metadata and every layer's
KV cache, put by the runner into the slot its own model's layers were built with.

Each model has its own slot (ModelContext.forward), so two models in one process — a target
and its draft — each find their own cache and metadata, and model code stays free of plumbing.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from atom.kernels.metadata import AttentionMetadata


@dataclass
class ForwardContext:
    meta: AttentionMetadata
    kv_caches: list[tuple[torch.Tensor, ...]]  # per layer: (k_cache, v_cache), or (latent,)
    kv_scales: list[tuple[float, float]]


class ForwardSlot:
    """Where one model's layers find the context of the forward running now (None between
    forwards). A plain attribute: attention reads it once per layer per step."""

    __slots__ = ("ctx",)

    def __init__(self) -> None:
        self.ctx: Optional[ForwardContext] = None

    def current(self) -> ForwardContext:
        ctx = self.ctx
        if ctx is None:
            raise RuntimeError("attention needs a forward context (set by the model runner)")
        return ctx

    @contextmanager
    def using(self, ctx: ForwardContext) -> Iterator[None]:
        """ctx for the forwards (or the CUDA-graph capture) inside; the previous one after."""
        prev, self.ctx = self.ctx, ctx
        try:
            yield
        finally:
            self.ctx = prev
