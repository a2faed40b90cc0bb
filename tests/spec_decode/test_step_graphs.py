"""Which steps replay a CUDA graph, which size they replay, and how a verify batch is padded:
the decisions of atom/runner/cuda_graphs.py, on CPU tensors (capturing needs a GPU: the
tests marked gpu in tests/engine/test_spec_decode_graphs.py compare captured against eager)."""
from __future__ import annotations

import torch

from atom.kernels.metadata import AttentionMetadata, leading_decodes
from atom.layers.forward_context import ForwardSlot
from atom.runner.cuda_graphs import (GraphPlan, StepGraphs, bucket, first_fitting,
                                     multi_token_sizes, plan_graphs, ragged_layout, takes,
                                     takes_ragged)


def _meta(q_lens: list[int], ctx: list[int], width: int = 3) -> AttentionMetadata:
    """A step's metadata as ModelRunner.prepare builds it (block tables of `width` blocks)."""
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(q_lens).cumsum(0)
    tables = torch.arange(len(q_lens) * width, dtype=torch.int32).view(len(q_lens), width)
    slots = torch.arange(100, 100 + sum(q_lens), dtype=torch.int64)
    return AttentionMetadata(cu, torch.tensor(ctx, dtype=torch.int32), tables, slots,
                             max(q_lens), max(ctx), max(q_lens) == 1, q_lens, ctx,
                             leading_decodes(q_lens))


def _graphs(q: int, sizes: list[int], inputs=(), ragged: bool = False) -> StepGraphs:
    return StepGraphs(lambda *a: (), sizes, q, 8, ForwardSlot(), [], [], torch.device("cpu"),
                      inputs, ragged=ragged)


def test_a_uniform_verify_batch_takes_the_graph_of_its_query_length():
    m = _meta([4, 4, 4], [10, 20, 30])
    assert takes(m, 12, 4, 8)
    assert not takes(m, 12, 1, 8)  # not the decode graph
    assert not takes(m, 12, 3, 8)  # nor another verify length
    assert not takes(m, 12, 4, 2)  # three sequences past the largest size


def test_mixed_query_lengths_run_eager():
    """An n-gram step where one row found fewer drafts: the longest query is 4, but the
    lengths do not sum to 4 a sequence, so no graph (its kernels would not be eager's)."""
    m = _meta([4, 2, 4], [10, 20, 30])
    assert not takes(m, 10, 4, 8)
    decode_and_verify = _meta([1, 4], [5, 9])
    assert not takes(decode_and_verify, 5, 4, 8)
    assert not takes(decode_and_verify, 5, 1, 8)


def test_a_decode_step_takes_the_decode_graph():
    m = _meta([1, 1, 1], [5, 6, 7])
    assert takes(m, 3, 1, 4) and not takes(m, 3, 2, 4)
    decode, verify = _graphs(1, [1, 2, 4]), _graphs(4, [1, 2, 4])
    assert first_fitting((decode, verify), m, 3) is decode
    assert first_fitting((decode, verify), _meta([4, 4], [8, 9]), 8) is verify
    assert first_fitting((None, verify), m, 3) is None
    assert first_fitting((decode, verify), _meta([4, 1], [8, 9]), 5) is None


def test_the_bucket_is_the_smallest_captured_size_that_holds_the_batch():
    sizes = [1, 2, 4, 8, 16]
    assert [bucket(sizes, b) for b in (1, 2, 3, 5, 8, 9, 16)] == [1, 2, 4, 8, 8, 16, 16]


def test_verify_sizes_stay_inside_the_step_token_budget():
    sizes = [1, 2, 4, 8, 16, 256]
    assert multi_token_sizes(sizes, 4, 64) == [1, 2, 4, 8, 16]
    assert multi_token_sizes(sizes, 1, 8192) == sizes


def test_the_plan_captures_the_verify_length_and_a_drafter_s_steps():
    assert plan_graphs(0, False, None, None) == GraphPlan((1,))
    # n-gram on GQA (ragged graphs): powers of two and 1 + k; on MLA (exact): every length
    assert plan_graphs(3, False, None, None) == GraphPlan((1, 2, 4))
    assert plan_graphs(6, False, None, None) == GraphPlan((1, 2, 4, 7))
    assert plan_graphs(1, False, None, None) == GraphPlan((1, 2))
    assert plan_graphs(3, False, 8, None) == GraphPlan((1, 2, 3, 4))
    assert plan_graphs(3, True, 8, 8) == GraphPlan((1, 4), (1, 4), (1,))  # MTP on MLA
    assert plan_graphs(1, True, None, None) == GraphPlan((1, 2), (1, 2), (1,))  # draft model
    # k = 8 on MLA: 9 queries would take the up-projected path, which reads host lengths
    assert plan_graphs(8, True, 8, 8) == GraphPlan((1,), (1,), (1,))
    assert plan_graphs(8, False, 8, None) == GraphPlan(tuple(range(1, 9)))
    # an MLA target with a GQA draft: the draft's catch-up still captures 1 + k
    assert plan_graphs(8, True, 8, None) == GraphPlan((1,), (1, 9), (1,))


def test_a_verify_batch_is_padded_to_its_bucket():
    """Three sequences of 1 + 3 tokens in the size-4 graph: their tokens, slots, context
    lengths and tables copied, the fourth sequence's slots -1 (no KV write) and its context 0
    (attention writes zeros), every sequence 4 queries in the static offsets."""
    g = _graphs(4, [2, 4, 8], inputs=[(5, torch.float32)])
    g.slots.fill_(7)  # what an earlier, larger step left
    g.ctx.fill_(9)
    m = _meta([4, 4, 4], [10, 20, 30])
    ids, pos = torch.arange(1000, 1012), torch.arange(12) + 50
    hidden = torch.randn(12, 5)
    assert g.stage(ids, pos, m, hidden) == (4, None)
    assert torch.equal(g.ids[:12], ids) and torch.equal(g.pos[:12], pos)
    assert torch.equal(g.inputs[0][:12], hidden)
    assert torch.equal(g.slots[:12], m.slot_mapping)
    assert g.slots[12:16].tolist() == [-1] * 4 and g.slots[16:].tolist() == [7] * 16
    assert g.ctx[:4].tolist() == [10, 20, 30, 0]
    assert torch.equal(g.tables[:3, :3], m.block_tables)
    static = g.meta(4)
    assert static.cu_seqlens_q.tolist() == [0, 4, 8, 12, 16]
    assert static.max_q_len == 4 and not static.is_decode and static.num_decode_seqs == 0
    assert static.q_lens_cpu == [4] * 4 and static.context_lens_cpu is None
    assert static.slot_mapping.shape == (16,)
    assert [a.shape[0] for a in g.args(4)] == [16, 16, 16]


def test_the_decode_graph_s_metadata_is_a_decode_batch():
    g = _graphs(1, [1, 2, 4])
    static = g.meta(2)
    assert static.is_decode and static.max_q_len == 1 and static.q_lens_cpu is None
    assert static.cu_seqlens_q.tolist() == [0, 1, 2]
    assert g.stage(torch.tensor([5]), torch.tensor([3]), _meta([1], [4])) == (1, None)


def test_a_ragged_graph_takes_shorter_queries_and_exact_ones_do_not():
    """An n-gram step of 2, 1 and 4 queries: a GQA graph of 4 a sequence takes it, an MLA
    (exact) one does not, nor does a ragged one of 3 (a sequence is longer)."""
    m = _meta([2, 1, 4], [10, 20, 30])
    assert takes_ragged(m, 4, 8) and not takes_ragged(m, 3, 8)
    assert not takes_ragged(m, 4, 2)  # three sequences past the largest size
    assert not takes_ragged(_meta([1, 1], [5, 6]), 4, 8)  # a decode step is the decode graph's
    assert not _graphs(4, [4]).fits(m, 7) and _graphs(4, [4], ragged=True).fits(m, 7)
    # tried shortest first, a step takes the shortest graph that holds its longest query
    two, four = _graphs(2, [4], ragged=True), _graphs(4, [4], ragged=True)
    assert first_fitting((two, four), _meta([2, 1], [5, 6]), 3) is two
    assert first_fitting((two, four), m, 7) is four


def test_ragged_tokens_sit_right_aligned_in_their_sequence_s_slots():
    assert ragged_layout([4, 2, 1], 4).tolist() == [0, 1, 2, 3, 6, 7, 11]
    assert ragged_layout([3, 3], 3).tolist() == list(range(6))


def test_a_ragged_step_is_staged_with_pad_queries_before_each_sequence():
    """Pad queries sit at the positions just before their sequence's first token (ctx - 4 + j,
    from 0 up), write no KV, and the outputs gather the step's own tokens back."""
    g = _graphs(4, [4], inputs=[(2, torch.float32)], ragged=True)
    m = _meta([2, 1, 4], [10, 2, 30])
    ids, pos = torch.tensor([11, 12, 21, 31, 32, 33, 34]), torch.tensor([8, 9, 1, 26, 27, 28, 29])
    hidden = torch.arange(14, dtype=torch.float32).view(7, 2)
    bs, where = g.stage(ids, pos, m, hidden)
    assert bs == 4 and where.tolist() == [2, 3, 7, 8, 9, 10, 11]
    assert g.ids[where].tolist() == ids.tolist()
    assert g.pos[:12].tolist() == [6, 7, 8, 9, 0, 0, 0, 1, 26, 27, 28, 29]
    assert g.slots[:16].tolist() == [-1, -1, 100, 101, -1, -1, -1, 102,
                                     103, 104, 105, 106, -1, -1, -1, -1]
    assert torch.equal(g.inputs[0][where], hidden)
    assert g.ctx.tolist()[:4] == [10, 2, 30, 0]
