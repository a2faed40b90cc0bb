"""Two-batch overlap: a decode batch split in two halves on two streams, so that one half's
attention runs beside the other half's projections.

Why: at large decode batches a layer is attention (every context's KV read once: bandwidth-bound)
followed by GEMMs (compute-bound), one after the other, so each leaves the other's resource idle.
Each half runs the same stages in the same order (projections, attention, projections, ...);
half b runs one stage behind half a, and a barrier after every stage keeps it there, so a's
attention always meets b's projections and the other way round (NanoFlow's nano-batches, on one
GPU). The runner captures this forward in the decode CUDA graphs of the larger batch sizes
(`runtime.two_batch_overlap`). Without a side stream (CPU) the stages run one after the other:
the same arithmetic, which the tests compare with the plain forward.
"""
from __future__ import annotations

from typing import Iterator, Optional

import torch
from torch import nn

from atom.runner import forward_context
from atom.runner.forward_context import ForwardContext


def _stages(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext,
            out: list[torch.Tensor]) -> Iterator[None]:
    """One half's forward through a Llama-family decoder (`embed_tokens`, `layers`, `norm`),
    pausing after each stage: embedding and layer 0's qkv; then per layer its attention, and its
    o_proj and MLP with the next layer's qkv (the final norm after the last)."""
    layers = model.layers
    qkv, residual = layers[0].project_qkv(model.embed_tokens(ids), None)
    yield
    for i, layer in enumerate(layers):
        with forward_context.forward_context(ctx):
            attn = layer.self_attn.attend(positions, qkv)
        yield
        x, residual = layer.finish(attn, residual)
        if i + 1 < len(layers):
            qkv, residual = layers[i + 1].project_qkv(x, residual)
        else:
            out.append(model.norm(x, residual)[0])
        yield


def _advance(stages: Iterator[None]) -> bool:
    """Runs the next stage; False when there was none left."""
    return next(stages, StopIteration) is not StopIteration


def two_batch_forward(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor, h: int,
                      ctx_a: ForwardContext, ctx_b: ForwardContext,
                      side: Optional[torch.cuda.Stream] = None) -> torch.Tensor:
    """Hidden states [B, hidden] of a decode batch whose rows [0, h) and [h, B) have the
    attention contexts ctx_a and ctx_b; half b's kernels go to `side` when given."""
    out_a: list[torch.Tensor] = []
    out_b: list[torch.Tensor] = []
    a = _stages(model, ids[:h], positions[:h], ctx_a, out_a)
    b = _stages(model, ids[h:], positions[h:], ctx_b, out_b)
    main = torch.cuda.current_stream() if side is not None else None
    _advance(a)  # a leads by one stage
    if side is not None:
        side.wait_stream(main)
    live = True
    while live:
        live = _advance(a)
        if side is None:
            live = _advance(b) or live
            continue
        with torch.cuda.stream(side):
            live = _advance(b) or live
        main.wait_stream(side)  # the barrier: neither half starts its next stage early
        side.wait_stream(main)
    if side is not None:
        out_b[0].record_stream(main)
    return torch.cat([out_a[0], out_b[0]])
