"""The KV block pool: blocks never used are handed out first, freed blocks keep their prefix
hash until they are reused (oldest freed first), and a pool of tens of millions of blocks (a tiny
model on an H200) costs nothing until its blocks are used."""
from __future__ import annotations

from atom import SamplingParams
from atom.model_engine.block_manager import BlockManager
from atom.model_engine.sequence import Sequence

BS = 4


def _seq(name: str, tokens: list[int]) -> Sequence:
    return Sequence(name, tokens, SamplingParams(max_tokens=1))


def _computed(pool: BlockManager, seq: Sequence) -> None:
    pool.allocate(seq, seq.num_tokens)
    seq.num_computed_tokens = seq.num_tokens
    pool.commit_full_blocks(seq)


def test_a_huge_pool_holds_only_the_blocks_in_use():
    pool = BlockManager(50_000_000, BS, True)
    seq = _seq("a", list(range(10)))
    _computed(pool, seq)
    assert seq.block_table == [0, 1, 2]
    assert pool.num_free_blocks == 50_000_000 - 3
    assert len(pool.ref_count) == 3 and not pool.free
    pool.free_seq(seq)
    assert pool.num_free_blocks == 50_000_000 and not pool.ref_count


def test_never_used_blocks_go_first_then_the_oldest_freed():
    pool = BlockManager(4, BS, False)
    a, b = _seq("a", list(range(8))), _seq("b", list(range(8)))
    pool.allocate(a, 8)
    pool.allocate(b, 8)
    assert (a.block_table, b.block_table) == ([0, 1], [2, 3])
    assert pool.num_free_blocks == 0 and not pool.try_allocate(_seq("c", [1]), 1)
    pool.free_seq(a)  # freed last block first: 1, then 0
    c = _seq("c", list(range(8)))
    assert pool.try_allocate(c, 8) and c.block_table == [1, 0]


def test_a_freed_prefix_is_found_until_its_block_is_reused():
    pool = BlockManager(3, BS, True)
    first = _seq("a", list(range(9)))  # two full blocks and one token
    _computed(pool, first)
    table = list(first.block_table)
    pool.free_seq(first)
    again = _seq("b", list(range(9)))
    pool.match_prefix(again)
    assert again.block_table == table[:2] and again.num_cached_tokens == 8
    assert pool.ref_count == {0: 1, 1: 1}
    pool.free_seq(again)
    other = _seq("c", [100 + i for i in range(12)])
    pool.allocate(other, 12)  # takes every block, the cached ones' contents with them
    pool.free_seq(other)
    late = _seq("d", list(range(9)))
    pool.match_prefix(late)
    assert late.block_table == [] and not pool.cached
