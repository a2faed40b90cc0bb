"""PagedAttention as one opaque torch op, so torch.compile (runtime.level=3) traces around it.

Attention reads its model's forward slot (this step's metadata and KV cache). Traced by dynamo,
each step's fresh context objects would become guards and recompile the model every step. As a
custom op, dynamo and inductor see only tensors in and a tensor out (shaped by the fake
implementation); the real implementation runs the layer's eager body, which finds the context
in the slot at run time.

Op arguments can only be tensors and scalars, so the op names its layer by index, and each
compiled model gets an op of its own that resolves the index among that model's layers: two
models in one process (a target and its speculative draft) never resolve each other's layers,
and no process-wide table maps indices to layers.
"""
from __future__ import annotations

import math
import uuid
import weakref
from typing import TYPE_CHECKING, Callable, Mapping, Optional

import torch

if TYPE_CHECKING:
    from atom.layers.attention import PagedAttention

AttentionOp = Callable[..., torch.Tensor]


def model_attention_op(layers: Mapping[int, "PagedAttention"]) -> AttentionOp:
    """A new op `atom::paged_attention_<id>` over `layers` (layer index → attention layer):
    `PagedAttention.forward`'s arguments, then the layer's index. It also writes k/v into the
    layer's KV cache: that cache lives in the forward slot, never among the op's arguments, so
    no tensor the graph holds is mutated and the op can be declared functional. The op holds
    the layers weakly: registered ops live as long as the process, models need not."""
    by_index = weakref.WeakValueDictionary(layers)
    name = f"atom::paged_attention_{uuid.uuid4().hex}"

    @torch.library.custom_op(name, mutates_args=())
    def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        positions: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool,
                        q_norm_weight: Optional[torch.Tensor],
                        k_norm_weight: Optional[torch.Tensor], norm_eps: float,
                        layer_idx: int) -> torch.Tensor:
        return by_index[layer_idx]._forward_impl(q, k, v, positions, cos_sin_cache, is_neox,
                                                 q_norm_weight, k_norm_weight, norm_eps)

    paged_attention.register_fake(_paged_attention_fake)
    return paged_attention


def _paged_attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          positions: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool,
                          q_norm_weight: Optional[torch.Tensor],
                          k_norm_weight: Optional[torch.Tensor], norm_eps: float,
                          layer_idx: int) -> torch.Tensor:
    """One row per token, the heads flattened: [T, Hq, D] → [T, Hq*D]."""
    return q.new_empty((q.shape[0], math.prod(q.shape[1:])))
