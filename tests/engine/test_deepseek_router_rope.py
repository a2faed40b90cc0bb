"""DeepSeek-V3's parts against transformers' own: the grouped top-k router (sigmoid scores, the
correction bias steering only the choice, the best topk_group of n_group groups) and YaRN
rotary (the cos/sin table and the softmax scale's mscale)."""
from __future__ import annotations

import pytest
import torch

from atom.layers.moe import GroupedTopKRouter
from atom.layers.rotary import RotaryEmbedding, rope_params
from atom.models.deepseek_v3 import softmax_scale


def _config(**kw):
    from transformers import DeepseekV3Config

    base = dict(hidden_size=64, num_attention_heads=4, n_routed_experts=16, num_experts_per_tok=4,
                n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                qk_nope_head_dim=16, qk_rope_head_dim=8, max_position_embeddings=2048)
    return DeepseekV3Config(**{**base, **kw})


@pytest.mark.parametrize("norm", [True, False])
def test_grouped_router_picks_and_weighs_like_transformers(norm):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    cfg = _config(norm_topk_prob=norm)
    g = torch.Generator().manual_seed(0)
    ref = DeepseekV3TopkRouter(cfg)
    ref.weight.data = torch.randn(16, 64, generator=g) * 0.1
    ref.e_score_correction_bias.data = torch.randn(16, generator=g) * 0.3
    ours = GroupedTopKRouter(64, 16, 4, 4, 2, norm, 2.5)
    ours.weight.data.copy_(ref.weight.data)
    ours.e_score_correction_bias.data.copy_(ref.e_score_correction_bias)
    x = torch.randn(200, 64, generator=g)
    _, ref_w, ref_ids = ref(x)
    w, ids = ours(x)
    ours_sorted, ref_sorted = ids.sort(-1), ref_ids.sort(-1)
    assert torch.equal(ours_sorted.values, ref_sorted.values)
    torch.testing.assert_close(w.gather(1, ours_sorted.indices),
                               ref_w.gather(1, ref_sorted.indices))
    assert all(len(set((row // 4).tolist())) <= 2 for row in ids), "more than topk_group groups"
    plain = (torch.sigmoid(x @ ref.weight.T) + ref.e_score_correction_bias).topk(4).indices
    assert not torch.equal(plain.sort(-1).values, ours_sorted.values), \
        "the group restriction should change some token's choice here"


@pytest.mark.parametrize("scaling", [
    {"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,  # DeepSeek-R1
     "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1},
    {"type": "yarn", "factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707,  # DeepSeek-V2-Lite
     "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1},
    {"type": "yarn", "factor": 8.0, "mscale": 0.707, "mscale_all_dim": 1.0,
     "original_max_position_embeddings": 256, "beta_fast": 32, "beta_slow": 1},
], ids=["r1", "v2_lite", "mscale_differs"])
def test_yarn_table_and_softmax_scale_match_transformers(scaling):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (DeepseekV3Attention,
                                                                      DeepseekV3RotaryEmbedding)

    cfg = _config(rope_scaling=scaling, max_position_embeddings=2048)
    positions = torch.tensor([[0, 1, 7, 100, 1000, 2047]])
    cos, sin = DeepseekV3RotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float32), positions)
    theta, sc = rope_params(cfg)
    ours = RotaryEmbedding(8, 8, 2048, theta, sc, is_neox=False).cos_sin_cache[positions[0]]
    torch.testing.assert_close(ours[:, :4], cos[0, :, :4], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[:, 4:], sin[0, :, :4], rtol=1e-5, atol=1e-5)
    assert softmax_scale(cfg) == pytest.approx(DeepseekV3Attention(cfg, 0).scaling, rel=1e-12)
