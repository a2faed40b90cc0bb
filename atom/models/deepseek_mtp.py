"""DeepSeek-V3's next-n (multi-token prediction) layer, run as a draft head.

The checkpoint stores it after the decoder layers, at index num_hidden_layers (`model.layers.61.*`
in R1): `enorm`, `hnorm`, `eh_proj` [H, 2H], a full decoder layer (MLA + an MoE MLP, or a dense
one below first_k_dense_replace) under the decoder layer's own names, and `shared_head.norm` /
`shared_head.head`. At position i it reads the target's final (normed) hidden state h_i and the
token after it:

    x = eh_proj(cat(enorm(embed(t_{i+1})), hnorm(h_i)))
    y = residual + mlp_out of the decoder layer on x      (no final norm: y feeds the next depth)
    logits_{i+2} = shared_head.head(shared_head.norm(y))

The reference is vLLM's and SGLang's deepseek_mtp, which serve these checkpoints: the
concatenation is embedding first (the DeepSeek-V3 report's §2.2 writes the hidden state first;
the served checkpoints are read embedding first) and the output is not normed. vLLM also
zeroes the embedding at position 0; this follows the formula and does not. Depth k > 1 reuses
the one layer with its own output y as the next h (as vLLM and SGLang do for R1's single
layer). The embedding is the target's (the drafter passes it in); the layer's stored copy is
not loaded.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from atom.layers.embedding import ParallelLMHead
from atom.layers.linear import ReplicatedLinear
from atom.layers.model_context import ModelContext
from atom.layers.norm import RMSNorm
from atom.layers.rotary import RotaryEmbedding
from atom.models.deepseek_v3 import DeepseekV3DecoderLayer


class SharedHead(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any) -> None:
        super().__init__()
        self.norm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)
        self.head = ParallelLMHead(mc, hf.vocab_size, hf.hidden_size)


class DeepseekMTPLayer(DeepseekV3DecoderLayer):
    """The next-n layer: its decoder-layer parameters keep the decoder layer's names, so the
    checkpoint's `model.layers.{N}.*` load by name under the model's `mtp.` prefix."""

    def __init__(self, mc: ModelContext, hf: Any, bias: bool, rotary: RotaryEmbedding) -> None:
        super().__init__(mc, hf, hf.num_hidden_layers, bias, rotary)
        h = hf.hidden_size
        self.enorm = RMSNorm(mc, h, hf.rms_norm_eps)
        self.hnorm = RMSNorm(mc, h, hf.rms_norm_eps)
        self.eh_proj = ReplicatedLinear(mc, 2 * h, h, bias=False)
        self.shared_head = SharedHead(mc, hf)

    def draft_hidden(self, positions: torch.Tensor, embeds: torch.Tensor,
                     hidden: torch.Tensor) -> torch.Tensor:
        """y at each position from the embedding of the token after it and the previous
        depth's hidden state there (the target's for the first depth). Writes this layer's KV
        at the forward context's slots."""
        x = self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(hidden)], dim=-1))
        out, residual = super().forward(positions, x, None)
        return out + residual

    def compute_logits(self, y: torch.Tensor) -> torch.Tensor:
        return self.shared_head.head(self.shared_head.norm(y))
