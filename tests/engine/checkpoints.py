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
}


def make_checkpoint(arch: str, root: Path, seed: int = 0) -> Path:
    import transformers
    from transformers import AutoModelForCausalLM

    cls_name, extra = ARCHS[arch]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **extra})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # random-init norms are ones; perturb so a wrong norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    out = root / arch
    model.save_pretrained(out, safe_serialization=True)
    return out
