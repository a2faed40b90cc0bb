"""An EAGLE-3 draft head (a `LlamaForCausalLMEagle3` checkpoint, e.g. the published
EAGLE3-LLaMA3.1-Instruct-8B) for a Llama or Qwen target: one Llama decoder layer whose attention
reads the normed embedding of the next token beside the normed hidden state, over the target's
low, middle and high hidden states fused by `fc` (the first depth) or its own pre-norm output
(depths 2..k), with its own reduced vocabulary mapped back to the target's by `d2t`.

Checkpoint names: `fc.weight` [H, 3H_target], `midlayer.*` (input_layernorm, hidden_norm,
self_attn.{q,k,v,o}_proj with q/k/v over 2H inputs, post_attention_layernorm, mlp), `norm.weight`,
`lm_head.weight` [draft_vocab, H], `d2t` [draft_vocab] (target id = draft id + d2t[draft id]);
`t2d` (the inverse mask) and any copy of the embedding are not loaded: the target's embedding
is used. config.json's `norm_before_residual` (EAGLE-3.1's speculators configs) makes the
residual the normed hidden state instead of the raw one (absent: the raw one, as the original
EAGLE-3 heads); `eagle_aux_hidden_state_layer_ids` names the target layers whose inputs are
captured (aux_layer_ids). The speculators package's own config layout (`speculators_config`,
`transformer_layer_config`) is not read.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from atom.layers.embedding import ParallelLMHead
from atom.layers.linear import QKVParallelLinear, ReplicatedLinear
from atom.layers.model_context import ModelContext
from atom.layers.norm import RMSNorm
from atom.models.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP, head_dim_of

ARCHITECTURE = "LlamaForCausalLMEagle3"


def aux_layer_ids(draft_hf: Any, target_layers: int) -> tuple[int, ...]:
    """The target layers whose input (the residual stream before them, as vLLM reads the ids)
    the head reads: `eagle_aux_hidden_state_layer_ids` at the config's top or in its
    `eagle_config`, else EAGLE-3's 2, L/2, L - 3."""
    ids = (getattr(draft_hf, "eagle_aux_hidden_state_layer_ids", None)
           or (getattr(draft_hf, "eagle_config", None) or {}).get(
               "eagle_aux_hidden_state_layer_ids"))
    return tuple(ids) if ids else (2, target_layers // 2, target_layers - 3)


class Eagle3Layer(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any) -> None:
        super().__init__()
        h, eps = hf.hidden_size, hf.rms_norm_eps
        bias = bool(getattr(hf, "attention_bias", False))
        self.input_layernorm = RMSNorm(mc, h, eps)
        self.hidden_norm = RMSNorm(mc, h, eps)
        self.self_attn = LlamaAttention(mc, hf, 0, bias, bias)
        self.self_attn.qkv_proj = QKVParallelLinear(mc, 2 * h, head_dim_of(hf),
                                                    hf.num_attention_heads,
                                                    hf.num_key_value_heads, bias=bias)
        self.post_attention_layernorm = RMSNorm(mc, h, eps)
        self.mlp = LlamaMLP(mc, h, hf.intermediate_size, hf.hidden_act)
        self.norm_before_residual = bool(getattr(hf, "norm_before_residual", False))

    def forward(self, positions: torch.Tensor, embeds: torch.Tensor,
                hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.input_layernorm(embeds)
        h = self.hidden_norm(hidden)
        residual = h if self.norm_before_residual else hidden
        x = self.self_attn(positions, self.self_attn.qkv_proj(torch.cat([e, h], -1)))
        return self.mlp.normed_forward(self.post_attention_layernorm, x, residual)


class Eagle3Draft(nn.Module):
    packed_modules_mapping = LlamaForCausalLM.packed_modules_mapping

    def __init__(self, hf: Any, mc: ModelContext) -> None:
        super().__init__()
        self.hf_config, self.context = hf, mc
        h = hf.hidden_size
        target_h = getattr(hf, "target_hidden_size", None) or h
        self.vocab_size = int(hf.vocab_size)
        draft_vocab = int(getattr(hf, "draft_vocab_size", None) or hf.vocab_size)
        self.fc = ReplicatedLinear(mc, 3 * target_h, h, bias=False)
        self.midlayer = Eagle3Layer(mc, hf)
        self.norm = RMSNorm(mc, h, hf.rms_norm_eps)
        self.lm_head = ParallelLMHead(mc, draft_vocab, h)
        self.d2t: Optional[nn.Parameter] = None
        if draft_vocab != self.vocab_size:
            self.d2t = nn.Parameter(torch.zeros(draft_vocab, dtype=torch.long),
                                    requires_grad=False)

    def skip_weight(self, name: str) -> bool:
        """t2d and the embedding's copy; d2t too when the head's vocabulary is the target's."""
        return (name == "t2d" or name.endswith("embed_tokens.weight")
                or (name == "d2t" and self.d2t is None))

    def draft_hidden(self, positions: torch.Tensor, embeds: torch.Tensor,
                     hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the normed output the head reads, the pre-norm output the next depth reads) at
        each position, from the embedding of the token after it and either the target's
        captured states there [T, 3H_target] or the previous depth's pre-norm output [T, H].
        Writes this head's KV at the positions' slots."""
        if hidden.shape[-1] != self.hf_config.hidden_size:
            hidden = self.fc(hidden)
        x, residual = self.midlayer(positions, embeds, hidden)
        return self.norm(x, residual)

    def compute_logits(self, normed: torch.Tensor) -> torch.Tensor:
        """Over the target's vocabulary: ids outside the draft's get -inf (probability 0)."""
        logits = self.lm_head(normed)
        if self.d2t is None:
            return logits
        ids = torch.arange(logits.shape[-1], device=logits.device) + self.d2t
        out = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
        out[:, ids] = logits
        return out
