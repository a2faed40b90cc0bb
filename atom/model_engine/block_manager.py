"""Paged KV-cache blocks with optional prefix caching.

A full block is identified by the hash chain of every token up to its end, so two sequences
share a block only when their whole prefixes agree. Freed blocks keep their hash and stay
findable until reused (oldest-freed first, after every block never used), which is what makes
a repeated prompt hit. Bookkeeping is per block ever used, not per block in the pool: a tiny
model on an H200 has tens of millions of blocks, and building a table of them all took minutes.
"""
from __future__ import annotations

from collections import OrderedDict

from atom.model_engine.sequence import Sequence


def _chain_hash(parent: int, tokens: list[int]) -> int:
    return hash((parent, tuple(tokens)))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.prefix_caching = enable_prefix_caching
        self.ref_count: dict[int, int] = {}  # held blocks only
        self.block_hash: dict[int, int] = {}  # blocks whose contents are registered
        self.free: OrderedDict[int, None] = OrderedDict()  # blocks freed, oldest first
        self.fresh = 0  # blocks [fresh, num_blocks) were never used
        self.cached: dict[int, int] = {}  # hash → block id
        self.queries = 0  # prompt blocks looked up in the prefix cache
        self.hits = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free) + self.num_blocks - self.fresh

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Blocks to add so the sequence can hold `num_tokens` tokens in total."""
        need = (num_tokens + self.block_size - 1) // self.block_size
        return max(0, need - len(seq.block_table))

    def _take(self) -> int:
        if self.fresh < self.num_blocks:
            block, self.fresh = self.fresh, self.fresh + 1
        else:
            block, _ = self.free.popitem(last=False)
            old = self.block_hash.pop(block, None)
            if old is not None and self.cached.get(old) == block:
                del self.cached[old]
        self.ref_count[block] = 1
        return block

    def _hashes(self, seq: Sequence, upto_blocks: int) -> list[int]:
        hashes, parent = seq.block_hashes, (seq.block_hashes[-1] if seq.block_hashes else 0)
        bs = self.block_size
        for i in range(len(hashes), upto_blocks):
            parent = _chain_hash(parent, seq.token_ids[i * bs:(i + 1) * bs])
            hashes.append(parent)
        return hashes

    def match_prefix(self, seq: Sequence) -> None:
        """On admission: adopt cached blocks for the longest cached prefix of the prompt.

        At least one token is left to compute, since sampling needs its logits."""
        if not self.prefix_caching or seq.block_table:
            return
        full = (seq.num_tokens - 1) // self.block_size
        hashes = self._hashes(seq, full)
        for h in hashes[:full]:
            block = self.cached.get(h)
            if block is None:
                break
            held = self.ref_count.get(block, 0)
            if held == 0:
                del self.free[block]
            self.ref_count[block] = held + 1
            seq.block_table.append(block)
        seq.num_cached_tokens = len(seq.block_table) * self.block_size
        seq.num_computed_tokens = seq.num_cached_tokens
        seq.num_hashed_blocks = len(seq.block_table)

    def record_admission(self, seq: Sequence) -> None:
        """Hit-rate bookkeeping, once per admitted prompt (not per retry while it waits)."""
        if self.prefix_caching:
            self.queries += (seq.num_tokens - 1) // self.block_size
            self.hits += seq.num_cached_tokens // self.block_size

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(seq, num_tokens) <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        for _ in range(self.blocks_needed(seq, num_tokens)):
            seq.block_table.append(self._take())

    def try_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Allocate what `num_tokens` needs if the pool has it; False (nothing taken) if not."""
        need = self.blocks_needed(seq, num_tokens)
        if need > self.num_free_blocks:
            return False
        for _ in range(need):
            seq.block_table.append(self._take())
        return True

    def commit_full_blocks(self, seq: Sequence) -> None:
        """Register blocks whose tokens are all computed, so later prompts can share them."""
        if not self.prefix_caching:
            return
        full = seq.num_computed_tokens // self.block_size
        if full <= seq.num_hashed_blocks:
            return
        hashes = self._hashes(seq, full)
        for i in range(seq.num_hashed_blocks, full):
            block, h = seq.block_table[i], hashes[i]
            if h not in self.cached:
                self.cached[h] = block
                self.block_hash[block] = h
        seq.num_hashed_blocks = full

    def free_seq(self, seq: Sequence) -> None:
        for block in reversed(seq.block_table):
            held = self.ref_count[block] - 1
            if held:
                self.ref_count[block] = held
            else:
                del self.ref_count[block]
                self.free[block] = None
        seq.block_table = []
        seq.num_hashed_blocks = 0
        seq.block_hashes = []
