"""ParallelState: the ranks a model is built with. A layer shards by the state it was handed,
whatever torch.distributed says: two states in one process build two different shards."""
from __future__ import annotations

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
