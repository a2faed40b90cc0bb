"""What every layer of one model is built with: its kernel backend, its ranks, its forward slot.

Handed to the model's constructor by whoever builds it (the builder, a test) and passed down to
each layer, which keeps the part it reads. Nothing here is process-wide: two models in one
process may run on different backends and ranks, each stepped through its own slot.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from atom.kernels.backend import KernelBackend
from atom.layers.forward_context import ForwardSlot
from atom.layers.parallel_state import ParallelState


@dataclass(frozen=True)
class ModelContext:
    backend: KernelBackend
    parallel: ParallelState = field(default_factory=ParallelState)
    forward: ForwardSlot = field(default_factory=ForwardSlot)
    # The routed experts' storage: None in the model dtype, or e4m3 codes with float32 scales
    # per output channel ("channel") or per 128 x 128 block ("block"); the loader decides it
    # before the layers are built, so fp8 experts never take their float size in memory.
    fp8_experts: Optional[str] = None
    # DP attention: attention, the embedding and the LM head are whole on every rank, which
    # runs them over its own sequences; only the MLPs shard over `parallel`, over the rows of
    # every rank (atom/layers/dp_attention.py).
    dp_attention: bool = False

    def attention_context(self) -> "ModelContext":
        """What the layers that see only this rank's rows are built with: one rank of one
        under DP attention (every head, the whole vocabulary), else this context."""
        if not self.dp_attention:
            return self
        return dataclasses.replace(self, parallel=ParallelState(), dp_attention=False)
