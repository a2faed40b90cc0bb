"""Tiny random-init checkpoints of each architecture atom runs, saved with safetensors."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

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


def make_checkpoint(arch: str, root: Path, seed: int = 0, name: Optional[str] = None,
                    **overrides: Any) -> Path:
    """`overrides`: config fields over the architecture's tiny ones; `name` is the folder
    (default: arch)."""
    import transformers
    from transformers import AutoModelForCausalLM

    cls_name, extra = ALL_ARCHS[arch]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **extra, **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # random-init norms are ones; perturb so a wrong norm shows
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(torch.randn_like(p) * 0.1)
        for bname, b in model.named_buffers():  # zeros at init: it would steer no routing
            if bname.endswith("e_score_correction_bias"):
                b.add_(torch.randn_like(b) * 0.05)
    out = root / (name or arch)
    model.save_pretrained(out, safe_serialization=True)
    return out


def add_mtp_layer(path: Path, seed: int = 1) -> Path:
    """Write a random DeepSeek next-n layer into a checkpoint made by make_checkpoint, under the
    names R1 uses (`model.layers.{N}.*`, N = num_hidden_layers): enorm, hnorm, eh_proj, the
    decoder layer's tensors (named as the last decoder layer's: MoE past
    first_k_dense_replace), shared_head.norm/head and the layer's copy of the embedding.
    transformers' DeepseekV3 does not read them (an oracle run just reports them unused)."""
    from safetensors.torch import load_file, save_file

    n = json.loads((path / "config.json").read_text())["num_hidden_layers"]
    tensors = load_file(str(path / "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    last = f"model.layers.{n - 1}."
    mtp = f"model.layers.{n}."
    for name, t in list(tensors.items()):
        if name.startswith(last):
            fresh = torch.randn(t.shape, generator=g) * t.float().std().clamp_min(0.02)
            if "norm" in name:
                fresh = 1 + 0.1 * torch.randn(t.shape, generator=g)
            tensors[mtp + name[len(last):]] = fresh.to(t.dtype)
    h = tensors["model.norm.weight"].shape[0]
    tensors[mtp + "enorm.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    tensors[mtp + "hnorm.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    tensors[mtp + "eh_proj.weight"] = torch.randn(h, 2 * h, generator=g) * (2 * h) ** -0.5
    tensors[mtp + "shared_head.norm.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    tensors[mtp + "shared_head.head.weight"] = torch.randn(
        tensors["lm_head.weight"].shape, generator=g) * 0.05
    tensors[mtp + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def make_self_drafting_mtp(root: Path, arch: str = "deepseek_v3_q_lora",
                           head_noise: float = 0.0) -> Path:
    """A one-layer DeepSeek whose next-n layer computes exactly what the target will: the
    target is made context-free (its attention's o_proj is zero, so its logits at a position
    are a function of that position's token) and its embedding rows have RMS 1, so the layer's
    enorm (weight 1) passes the embedding through; eh_proj = [I, 0] keeps that half, the
    decoder layer is a copy of the target's only layer (MoE in both: first_k_dense_replace=0)
    and shared_head is the target's final norm and LM head. Its draft for position i + 2 is
    then the target's own greedy token there, so greedy drafts are accepted (up to float
    ties). head_noise > 0 perturbs shared_head.head by that fraction of its spread: a draft
    distribution q near p but not p."""
    from safetensors.torch import load_file, save_file

    path = add_mtp_layer(make_checkpoint(arch, root, name=f"{arch}_self_mtp_{head_noise}",
                                         num_hidden_layers=1, first_k_dense_replace=0))
    tensors = load_file(str(path / "model.safetensors"))
    emb = tensors["model.embed_tokens.weight"]
    tensors["model.embed_tokens.weight"] = emb / emb.pow(2).mean(-1, keepdim=True).sqrt()
    tensors["model.layers.0.self_attn.o_proj.weight"].zero_()
    for name in [k for k in tensors if k.startswith("model.layers.0.")]:
        tensors["model.layers.1." + name[len("model.layers.0."):]] = tensors[name].clone()
    h = emb.shape[1]
    tensors["model.layers.1.enorm.weight"] = torch.ones(h)
    tensors["model.layers.1.eh_proj.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], 1)
    tensors["model.layers.1.shared_head.norm.weight"] = tensors["model.norm.weight"].clone()
    head = tensors["lm_head.weight"]
    noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(2))
    tensors["model.layers.1.shared_head.head.weight"] = head + head_noise * head.std() * noise
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def local_engine(path: Path, *overrides: str):
    """An in-process engine over a checkpoint made here, on the CPU, with the test's overrides."""
    import atom

    return atom.build_engine(atom.compose([
        "model=local", f"model.path={path}", "runtime=cpu", "load.progress_bar=false",
        *overrides]))
