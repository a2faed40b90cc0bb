"""Tiny random-init checkpoints of each architecture atom runs, saved with safetensors."""
from __future__ import annotations

from pathlib import Path

import torch

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)

ARCHS = {
    "llama": ("LlamaConfig", dict(rope_theta=10000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})),
    "qwen2": ("Qwen2Config", dict(rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", dict(head_dim=32, rope_theta=1000000.0)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(head_dim=16, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=32, norm_topk_prob=True)),
    # GLM-4.5's layout: half of each head rotates, q/k/v biases, DeepSeek's grouped router with
    # a shared expert after one dense layer; head_dim apart from hidden / heads.
    "glm4_moe": ("Glm4MoeConfig", dict(head_dim=32, partial_rotary_factor=0.5, attention_bias=True,
                                       n_routed_experts=8, num_experts_per_tok=2, n_group=4,
                                       topk_group=2, moe_intermediate_size=32, n_shared_experts=1,
                                       first_k_dense_replace=1, routed_scaling_factor=2.5,
                                       norm_topk_prob=True)),
    # MiniMax-M2's: q/k norms over all heads, rotary_dim of its released configs (a quarter of
    # the head here), every layer sparse with a biased sigmoid router.
    "minimax_m2": ("MiniMaxM2Config", dict(head_dim=32, rotary_dim=8, num_local_experts=8,
                                           num_experts_per_tok=2, intermediate_size=32)),
}

# DeepSeek-V3/R1's config keys at tiny sizes: the first layer dense (first_k_dense_replace), 8
# routed experts in 4 groups of which 2 are searched, one shared expert, R1's rope (yarn, mscale
# = mscale_all_dim, interleaved pairs) over a context stretched from 64 to 512.
_DEEPSEEK = dict(num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
                 qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24, moe_intermediate_size=32,
                 n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=4,
                 topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                 first_k_dense_replace=1, rope_theta=10000.0,
                 rope_scaling={"type": "yarn", "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                               "original_max_position_embeddings": 64, "beta_fast": 32,
                               "beta_slow": 1})
DEEPSEEK_ARCHS = {
    # DeepSeek-V2-Lite's shape: no q compression; its yarn mscale differs from mscale_all_dim.
    "deepseek_v3_q_full": ("DeepseekV3Config", dict(_DEEPSEEK, q_lora_rank=None, rope_scaling={
        **_DEEPSEEK["rope_scaling"], "mscale": 0.707, "mscale_all_dim": 1.0})),
    "deepseek_v3_q_lora": ("DeepseekV3Config", dict(_DEEPSEEK, q_lora_rank=24)),
}
ALL_ARCHS = {**ARCHS, **DEEPSEEK_ARCHS}


def make_checkpoint(arch: str, root: Path, seed: int = 0, **overrides) -> Path:
    """`overrides`: config fields over the architecture's tiny ones."""
    import transformers
    from transformers import AutoModelForCausalLM

    cls_name, extra = ALL_ARCHS[arch]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **extra, **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # random-init norms are ones; perturb so a wrong norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        for name, b in model.named_buffers():  # zeros at init: it would steer no routing
            if name.endswith("e_score_correction_bias"):
                b.add_(torch.randn_like(b) * 0.05)
    out = root / arch
    model.save_pretrained(out, safe_serialization=True)
    return out


def local_engine(path: Path, *overrides: str):
    """An in-process engine over a checkpoint made here, on the CPU, with the test's overrides."""
    import atom

    return atom.build_engine(atom.compose([
        "model=local", f"model.path={path}", "runtime=cpu", "load.progress_bar=false",
        *overrides]))
