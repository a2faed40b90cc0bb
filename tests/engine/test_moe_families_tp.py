"""GLM-4.5 and MiniMax-M2 under tensor parallelism on the CPU (two gloo ranks): the same greedy
tokens as one process. MiniMax-M2's q/k norms span every head, so with heads split across ranks
each rank's sum of squares is all-reduced; with fewer KV heads than ranks the replicated head's
share must be counted once."""
from __future__ import annotations

import pytest
import torch

from tests.engine.checkpoints import ALL_ARCHS, COMMON, local_engine
from tests.engine.rank_processes import greedy_tokens


def _checkpoint(root, arch: str, **changes):
    import transformers

    cls_name, extra = ALL_ARCHS[arch]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **extra, **changes})
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    path = root / arch
    model.save_pretrained(path)
    return path


def _tokens(path, tp: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 256, (k,), generator=g).tolist() for k in (6, 29, 50)]
    return greedy_tokens(local_engine(path, "kv_cache.num_blocks=48",
                                      "scheduler.max_num_batched_tokens=40",
                                      f"parallel.tensor_parallel_size={tp}"), prompts, 8)


@pytest.mark.parametrize("arch,changes", [("glm4_moe", {}), ("minimax_m2", {}),
                                          ("minimax_m2", {"num_key_value_heads": 1})],
                         ids=["glm4_moe", "minimax_m2", "minimax_m2_one_kv_head"])
def test_two_ranks_give_the_one_process_tokens(tmp_path, arch, changes):
    path = _checkpoint(tmp_path, arch, **changes)
    assert _tokens(path, 2) == _tokens(path, 1)
