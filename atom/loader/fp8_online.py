"""fp8 weights from float ones: `quant=fp8` on a bf16/fp32 checkpoint, and fp8 dummy weights.

Every linear layer's weight is quantized per output channel (per 128 x 128 block for
fp8_block) to e4m3 as it loads, and so are the routed experts (FusedMoE quantizes each
expert's parts itself, ModelContext.fp8_experts); embeddings, the LM head, norms, routers and
the weights a layer keeps in float (`LinearBase.keep_float`) stay in the model dtype, as vLLM's
online fp8 does. Activations are then quantized dynamically per token.
"""
from __future__ import annotations

from torch import nn

from atom.kernels.fp8_weight import quantize
from atom.layers.linear import LinearBase


def fp8_linear_weights(model: nn.Module) -> set[str]:
    """Names of the parameters that may hold fp8: the weights of linear layers not kept float."""
    return {f"{name}.weight" if name else "weight" for name, m in model.named_modules()
            if isinstance(m, LinearBase) and not m.keep_float}


def quantize_dummy(model: nn.Module, block: bool) -> None:
    """Dummy weights (already filled, at real shapes) in fp8: the scales are those of the
    filled values, never zeros, so the kernels see realistic codes."""
    for m in model.modules():
        if isinstance(m, LinearBase) and not m.keep_float:
            m.put_quantized(quantize(m.weight.data, block))
