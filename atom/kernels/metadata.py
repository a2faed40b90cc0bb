"""The per-forward attention metadata every attention backend reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


def leading_decodes(q_lens: list[int]) -> int:
    """AttentionMetadata.num_decode_seqs of a batch: its leading run of one-query sequences,
    0 when every sequence has one (an all-decode batch takes the decode path whole)."""
    return next((i for i, n in enumerate(q_lens) if n != 1), 0)


@dataclass
class AttentionMetadata:
    """A batch of sequences, each contributing `q_len` new tokens on top of a cached context.

    Prefill chunks, prefix-cache hits and decodes are the same shape: sequence i's queries are
    positions [ctx_len_i - q_len_i, ctx_len_i) and attend causally to keys [0, ctx_len_i).
    """

    cu_seqlens_q: torch.Tensor  # [B+1] int32, offsets of each sequence's queries in the batch
    context_lens: torch.Tensor  # [B] int32, keys each sequence attends to (cached + new)
    block_tables: torch.Tensor  # [B, max_blocks] int32, -1 padded
    slot_mapping: torch.Tensor  # [T] int64, cache slot of each new token (-1 = do not store)
    max_q_len: int
    max_context_len: int
    is_decode: bool  # every sequence has q_len == 1 (CUDA-graph eligible)
    # Host copies, for backends (like the torch reference) that loop over sequences.
    q_lens_cpu: Optional[list[int]] = None
    context_lens_cpu: Optional[list[int]] = None
    # Leading sequences with one query each in a batch that is not all decodes: a backend may
    # run them through its decode kernel (GQA-shared KV reads) and the rest through prefill.
    num_decode_seqs: int = 0

    def decode_head(self) -> "AttentionMetadata":
        """The batch's first num_decode_seqs sequences (one query each), as views from offset 0;
        the rest go to the prefill kernel with first_seq, not as a slice."""
        n = self.num_decode_seqs
        return AttentionMetadata(self.cu_seqlens_q[:n + 1], self.context_lens[:n],
                                 self.block_tables[:n], self.slot_mapping[:n], 1,
                                 self.max_context_len, True)

    @property
    def num_seqs(self) -> int:
        return self.context_lens.shape[0]
