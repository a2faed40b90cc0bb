"""DeepSeek-V3 / R1 (and Kimi-K2, the same architecture at other sizes): multi-head latent
attention and grouped-routed MoE with shared experts after `first_k_dense_replace` dense layers.

Module names follow the HF checkpoints (`self_attn.q_a_proj`, `kv_a_proj_with_mqa`,
`mlp.gate.e_score_correction_bias`, `mlp.experts.E.gate_proj`, `mlp.shared_experts.*`), so the
weights load by name; the multi-token-prediction layers stored after the last decoder layer
(`model.layers.61.*` in R1) are skipped unless `specdecode=mtp` asks for the first of them
(`add_mtp`, atom/models/deepseek_mtp.py).
"""
from __future__ import annotations

import re
from typing import Any, Optional

import torch
from torch import nn

from atom.config.errors import ConfigError
from atom.layers.dp_attention import mlp_ranks, mlp_step
from atom.layers.linear import ColumnParallelLinear, ReplicatedLinear, RowParallelLinear
from atom.layers.mla import MLAAttention
from atom.layers.model_context import ModelContext
from atom.layers.moe import FusedMoE, GroupedTopKRouter
from atom.layers.norm import RMSNorm
from atom.layers.rotary import RotaryEmbedding, rope_kind, rope_params, yarn_mscale
from atom.models.llama import LlamaForCausalLM, LlamaMLP, LlamaModel

# transformers' DeepseekV3RMSNorm default, which q_a_layernorm and kv_a_layernorm keep (they do
# not take rms_norm_eps).
_LATENT_NORM_EPS = 1e-6
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def softmax_scale(hf: Any) -> float:
    """1/sqrt(qk head dim), times YaRN's mscale(factor, mscale_all_dim)² when the context is
    stretched (R1: factor 40, mscale_all_dim 1.0 → 1.369² ≈ 1.874)."""
    scale = (hf.qk_nope_head_dim + hf.qk_rope_head_dim) ** -0.5
    _, scaling = rope_params(hf)
    if scaling is not None and rope_kind(scaling) == "yarn" and scaling.get("mscale_all_dim"):
        scale *= yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
    return scale


def rotary_embedding(hf: Any) -> RotaryEmbedding:
    """The rope dims' table, one for every layer: R1's 163,840 positions × 64 dims in float32 are
    42 MB, 2.5 GB if each of its 61 layers kept its own."""
    theta, scaling = rope_params(hf)
    # rope_interleave (the checkpoints' layout): the rope dims rotate in adjacent pairs.
    return RotaryEmbedding(hf.qk_rope_head_dim, hf.qk_rope_head_dim, hf.max_position_embeddings,
                           theta, scaling, is_neox=not getattr(hf, "rope_interleave", True))


class DeepseekV3Attention(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, bias: bool,
                 rotary: RotaryEmbedding) -> None:
        super().__init__()
        heads = hf.num_attention_heads
        self.nope, self.rope, self.v_dim = hf.qk_nope_head_dim, hf.qk_rope_head_dim, hf.v_head_dim
        self.kv_lora_rank, self.num_heads = hf.kv_lora_rank, heads // mc.parallel.tp_size
        qk = self.nope + self.rope
        self.q_lora_rank: Optional[int] = hf.q_lora_rank
        if self.q_lora_rank is None:
            self.q_proj = ColumnParallelLinear(mc, hf.hidden_size, heads * qk)
        else:
            self.q_a_proj = ReplicatedLinear(mc, hf.hidden_size, self.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(mc, self.q_lora_rank, _LATENT_NORM_EPS)
            self.q_b_proj = ColumnParallelLinear(mc, self.q_lora_rank, heads * qk)
        self.kv_a_proj_with_mqa = ReplicatedLinear(mc, hf.hidden_size,
                                                   self.kv_lora_rank + self.rope, bias=bias)
        self.kv_a_layernorm = RMSNorm(mc, self.kv_lora_rank, _LATENT_NORM_EPS)
        self.kv_b_proj = ColumnParallelLinear(mc, self.kv_lora_rank,
                                              heads * (self.nope + self.v_dim))
        self.kv_b_proj.keep_float = True  # MLA reads it as a matrix (absorption, prefill)
        self.o_proj = RowParallelLinear(mc, heads * self.v_dim, hf.hidden_size, bias=bias)
        self.rotary_emb = rotary
        self.attn = MLAAttention(mc, self.num_heads, self.nope, self.rope, self.v_dim,
                                 self.kv_lora_rank, softmax_scale(hf), layer_idx)

    def process_weights_after_loading(self) -> None:
        self.attn.absorb(self.kv_b_proj.weight)

    def forward(self, positions: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """h: the layer's normed input [T, hidden]."""
        if self.q_lora_rank is None:
            q = self.q_proj(h)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(h)))
        q = q.view(-1, self.num_heads, self.nope + self.rope)
        kv_c, k_pe = self.kv_a_proj_with_mqa(h).split([self.kv_lora_rank, self.rope], dim=-1)
        rope = self.rotary_emb
        out = self.attn(q, self.kv_a_layernorm(kv_c), k_pe, positions,
                        rope.cos_sin_cache, rope.is_neox, self.kv_b_proj.weight)
        return self.o_proj(out)


class DeepseekV3MoE(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any, reduce_results: bool = True) -> None:
        super().__init__()
        self.gate = GroupedTopKRouter(hf.hidden_size, hf.n_routed_experts, hf.num_experts_per_tok,
                                      hf.n_group, hf.topk_group, bool(hf.norm_topk_prob),
                                      float(hf.routed_scaling_factor))
        # Routed and shared experts leave their partial sums to one all-reduce of both: R1 at
        # tp8 makes 123 all-reduces a forward instead of 181. reduce_results=False leaves that
        # sum to the caller (DP attention's reduce-scatter).
        self.parallel = mc.parallel
        self.reduce_results = reduce_results
        self.experts = FusedMoE(mc, hf.n_routed_experts, hf.hidden_size, hf.moe_intermediate_size,
                                reduce_results=False)
        self.shared_experts: Optional[LlamaMLP] = None
        if hf.n_shared_experts:
            self.shared_experts = LlamaMLP(mc, hf.hidden_size,
                                           hf.moe_intermediate_size * hf.n_shared_experts,
                                           getattr(hf, "hidden_act", "silu"), reduce_results=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.experts(x, *self.gate(x))
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return self.parallel.all_reduce(out) if self.reduce_results else out

    def normed_forward(self, norm: RMSNorm, x: torch.Tensor,
                       residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The router, the routed and the shared experts all read the normed x."""
        x, residual = norm(x, residual)
        return self(x), residual


class DeepseekV3DecoderLayer(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, bias: bool,
                 rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.self_attn = DeepseekV3Attention(mc.attention_context(), hf, layer_idx, bias, rotary)
        # DP attention: the dense first layers' MLPs too are tensor-parallel over every rank's
        # rows, as the MoE ones (one path, and 1/tp of their weights on each rank).
        reduce = not mc.dp_attention
        if layer_idx >= hf.first_k_dense_replace:
            self.mlp: nn.Module = DeepseekV3MoE(mc, hf, reduce)
        else:
            self.mlp = LlamaMLP(mc, hf.hidden_size, hf.intermediate_size,
                                getattr(hf, "hidden_act", "silu"), reduce)
        self.mlp_ranks = mlp_ranks(mc)
        self.input_layernorm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)

    def forward(self, positions: torch.Tensor, x: torch.Tensor,
                residual: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            h, residual = self.input_layernorm(x), x
        else:
            h, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, h)
        return mlp_step(self.mlp, self.post_attention_layernorm, x, residual, self.mlp_ranks)


class DeepseekV3Model(LlamaModel):
    def make_layers(self, mc: ModelContext, hf: Any, qkv_bias: bool,
                    o_bias: bool) -> nn.ModuleList:
        """attention_bias is on q_a_proj, kv_a_proj_with_mqa and o_proj alike."""
        rotary = rotary_embedding(hf)
        return nn.ModuleList(DeepseekV3DecoderLayer(mc, hf, i, qkv_bias, rotary)
                             for i in range(hf.num_hidden_layers))


class DeepseekV3ForCausalLM(LlamaForCausalLM):
    model_cls = DeepseekV3Model
    packed_modules_mapping = {"gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}

    def __init__(self, hf: Any, mc: ModelContext) -> None:
        refuse_what_cannot_run(hf)
        super().__init__(hf, mc)
        self.mtp: Optional[nn.Module] = None

    def add_mtp(self) -> None:
        """Build the first next-n layer (`model.layers.{num_hidden_layers}.*`) as `self.mtp`,
        before the weights load: its attention takes the next KV layer index, so the pool
        sizes it with the rest."""
        from atom.models.deepseek_mtp import DeepseekMTPLayer  # it builds on this module's layers

        hf = self.hf_config
        rotary = self.model.layers[0].self_attn.rotary_emb
        self.mtp = DeepseekMTPLayer(self.context, hf, bool(getattr(hf, "attention_bias", False)),
                                    rotary)

    def skip_weight(self, name: str) -> bool:
        """The checkpoint's MTP layers: decoder indices at and past num_hidden_layers (also the
        layers a reduced-depth run, model.hf_config.num_hidden_layers=N, leaves out), but for
        the one `add_mtp` built, less its copy of the shared embedding."""
        m = _LAYER.match(name)
        if m is None or int(m.group(1)) < self.hf_config.num_hidden_layers:
            return False
        return (self.mtp is None or int(m.group(1)) != self.hf_config.num_hidden_layers
                or ".embed_tokens." in name)

    def checkpoint_name(self, name: str) -> str:
        """Where a checkpoint tensor lives in this model: the next-n layer's under `mtp.`."""
        prefix = f"model.layers.{self.hf_config.num_hidden_layers}."
        return "mtp." + name[len(prefix):] if name.startswith(prefix) else name


def refuse_what_cannot_run(hf: Any) -> None:
    """Routers other than V3's and kernel backends without MLA stop here, before any weight is
    read, instead of failing inside the load or computing something else. (Block-fp8
    checkpoints load: atom.config.quant checks their quantization_config.)"""
    for key, supported in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):
        value = getattr(hf, key, supported)
        if value != supported:
            raise ConfigError(f"model.hf_config.{key}", value,
                              f"DeepseekV3 routing is implemented for {key}={supported} only")
