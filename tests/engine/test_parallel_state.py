"""ParallelState: the ranks a model is built with. A layer shards by the state it was handed,
whatever torch.distributed says: two states in one process build two different shards."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from atom.kernels.backend import get_backend
from atom.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from atom.layers.model_context import ModelContext
from atom.layers.parallel_state import ParallelState


def _ctx(size: int, rank: int) -> ModelContext:
    return ModelContext(get_backend("torch"), ParallelState(tp_size=size, tp_rank=rank))


def test_outside_torch_distributed_a_process_is_one_rank():
    assert ParallelState.of_process() == ParallelState()


@pytest.mark.parametrize("size,rank", [(1, 1), (2, 2), (0, 0), (2, -1)])
def test_a_rank_outside_its_group_is_refused(size, rank):
    with pytest.raises(ValueError, match=f"tp rank {rank} of {size}"):
        ParallelState(tp_size=size, tp_rank=rank)


def test_layers_shard_by_the_state_they_were_built_with():
    """Rank r of 2 keeps rows (column-parallel) or columns (row-parallel) [r·n/2, (r+1)·n/2);
    only rank 0 adds a row-parallel bias, which the all-reduce would otherwise count twice."""
    full = torch.arange(8 * 6, dtype=torch.float32).view(8, 6)
    for rank in (0, 1):
        col = ColumnParallelLinear(_ctx(2, rank), 6, 8)
        col.weight.weight_loader(col.weight, full)
        torch.testing.assert_close(col.weight.data, full[4 * rank:4 * rank + 4])
        row = RowParallelLinear(_ctx(2, rank), 6, 8, bias=True)
        row.weight.weight_loader(row.weight, full)
        torch.testing.assert_close(row.weight.data, full[:, 3 * rank:3 * rank + 3])
        assert row.adds_bias is (rank == 0)


def test_fewer_kv_heads_than_ranks_each_rank_keeps_its_replica():
    """Two KV heads over four ranks: ranks 0-1 keep head 0, ranks 2-3 head 1."""
    head_dim, kv = 2, torch.arange(2 * 2, dtype=torch.float32).view(4, 1).expand(4, 3)
    for rank in range(4):
        qkv = QKVParallelLinear(_ctx(4, rank), 3, head_dim, num_heads=4, num_kv_heads=2)
        qkv.weight.weight_loader(qkv.weight, kv.clone(), "k")
        q_rows = 4 * head_dim // 4
        k_rows = qkv.weight.data[q_rows:q_rows + head_dim]
        head = rank * 2 // 4
        torch.testing.assert_close(k_rows, kv[head * head_dim:(head + 1) * head_dim])


@dataclass(frozen=True)
class _CountingState(ParallelState):
    """A rank of two that records each all-reduce and leaves x as this rank's part: what is
    counted is how often a layer communicates, not the sum (the gloo tests check the sums)."""

    reduced: list = field(default_factory=list)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self.reduced.append(tuple(x.shape))
        return x


def test_a_deepseek_moe_block_reduces_its_routed_and_shared_experts_once():
    """The routed experts' and the shared expert's partial sums are added on each rank and
    all-reduced together: one all-reduce per MoE block, not two (R1 at tp8: 123 a forward,
    not 181); the block's output is the two partials' sum."""
    import transformers

    from atom.models.deepseek_v3 import DeepseekV3MoE
    from tests.engine.checkpoints import COMMON, DEEPSEEK_ARCHS

    _, extra = DEEPSEEK_ARCHS["deepseek_v3_q_lora"]
    hf = transformers.DeepseekV3Config(**{**COMMON, **extra})
    state = _CountingState(tp_size=2, tp_rank=0)
    torch.manual_seed(0)
    moe = DeepseekV3MoE(ModelContext(get_backend("torch"), state), hf)
    for p in moe.parameters():
        p.data.normal_(0, 0.1)
    x = torch.randn(5, hf.hidden_size)
    out = moe(x)
    assert state.reduced == [(5, hf.hidden_size)]
    routed = moe.experts(x, *moe.gate(x))
    torch.testing.assert_close(out, routed + moe.shared_experts(x))
    assert len(state.reduced) == 1  # the parts alone do not reduce either
