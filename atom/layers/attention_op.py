"""PagedAttention as one opaque torch op, so torch.compile (runtime.level=3) traces around it.

Attention reads the per-forward context (this step's metadata and KV cache). Traced by dynamo,
each step's fresh context objects would become guards and recompile the model every step. As the
custom op `atom::paged_attention`, dynamo and inductor see only tensors in and a tensor out
(shaped by the fake implementation); the real implementation runs the layer's eager body, which
finds the context at run time.

Op arguments can only be tensors and scalars, so the op names its layer by index. The index is
resolved through the layers that the running compiled forward bound into the forward context
(`bound_layers`), not through a process-wide table filled at construction: two models in one
process (tests, a speculative draft model) would overwrite each other's indices there.
"""
from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

import torch

from atom.layers import forward_context

if TYPE_CHECKING:
    from atom.layers.attention import PagedAttention


@contextmanager
def bound_layers(layers: Mapping[int, "PagedAttention"]) -> Iterator[None]:
    """Makes `layers` (layer index → attention layer) the ones the op resolves, for one forward
    (or one CUDA-graph capture: a replay runs recorded kernels and resolves nothing): a nested
    forward context that carries them."""
    ctx = forward_context.current()
    if ctx is None:
        raise RuntimeError("attention layers are bound inside a forward context (set by the runner)")
    with forward_context.forward_context(dataclasses.replace(ctx, attention_layers=layers)):
        yield


@torch.library.custom_op("atom::paged_attention", mutates_args=())
def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                    cos_sin_cache: torch.Tensor, is_neox: bool,
                    q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor],
                    norm_eps: float, layer_idx: int) -> torch.Tensor:
    """`PagedAttention.forward`'s arguments, then the layer's index. It also writes k/v into the
    layer's KV cache: that cache lives in the forward context, never among the op's arguments, so
    no tensor the graph holds is mutated and the op can be declared functional."""
    ctx = forward_context.current()
    if ctx is None or ctx.attention_layers is None:
        raise RuntimeError("atom::paged_attention ran outside a compiled forward "
                           "(atom.runner.compile binds the model's attention layers)")
    return ctx.attention_layers[layer_idx]._forward_impl(q, k, v, positions, cos_sin_cache, is_neox,
                                            q_norm_weight, k_norm_weight, norm_eps)


@paged_attention.register_fake
def _paged_attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          positions: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool,
                          q_norm_weight: Optional[torch.Tensor],
                          k_norm_weight: Optional[torch.Tensor], norm_eps: float,
                          layer_idx: int) -> torch.Tensor:
    """One row per token, the heads flattened: [T, Hq, D] → [T, Hq*D]."""
    return q.new_empty((q.shape[0], math.prod(q.shape[1:])))
