"""Sequences stepped through a model the way the runner steps them, on their own KV cache: for
tests that call a forward directly (compiled, captured) and compare it with eager.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from atom.kernels.metadata import AttentionMetadata, leading_decodes
from atom.layers.forward_context import ForwardContext
from atom.runner.kv_cache import allocate, model_kv_spec

BLOCK, BLOCKS_PER_SEQ = 16, 4


@dataclass
class SteppedBatch:
    """Sequences with their own blocks of a fresh KV cache, stepped as the runner steps them."""

    model: torch.nn.Module
    num_seqs: int
    caches: list = field(init=False)
    scales: list = field(init=False)
    lens: list[int] = field(init=False)
    device: torch.device = field(init=False)

    def __post_init__(self) -> None:
        weight = self.model.lm_head.weight
        self.device = weight.device
        spec = model_kv_spec(self.model, weight.dtype, BLOCK)
        _, self.caches, self.scales = allocate(spec, self.num_seqs * BLOCKS_PER_SEQ, self.device)
        self.lens = [0] * self.num_seqs

    def step(self, forward, new_tokens: dict[int, list[int]]) -> torch.Tensor:
        """Runs `forward` over the new tokens of the sequences named; last-token logits per seq."""
        ids, pos, meta = self.prepare(new_tokens)
        with torch.inference_mode(), self.model.context.forward.using(self.context(meta)):
            hidden = forward(ids, pos)
            return self.model.compute_logits(hidden[meta.cu_seqlens_q[1:].long() - 1])

    def context(self, meta: AttentionMetadata) -> ForwardContext:
        return ForwardContext(meta, self.caches, self.scales)

    def prepare(self, new_tokens: dict[int, list[int]]):
        """(input ids, positions, metadata) of one step; the sequences' lengths move on."""
        seqs = sorted(new_tokens)
        q_lens = [len(new_tokens[s]) for s in seqs]
        starts = [self.lens[s] for s in seqs]
        ctx = [st + n for st, n in zip(starts, q_lens)]
        pos = torch.cat([torch.arange(st, c) for st, c in zip(starts, ctx)])
        tables = torch.stack([torch.arange(s * BLOCKS_PER_SEQ, (s + 1) * BLOCKS_PER_SEQ)
                              for s in seqs]).int()
        seq_of_tok = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor(q_lens))
        slots = tables[seq_of_tok, pos // BLOCK].long() * BLOCK + pos % BLOCK
        cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
        ids = torch.tensor([t for s in seqs for t in new_tokens[s]])
        for s, c in zip(seqs, ctx):
            self.lens[s] = c
        dev = self.device
        meta = AttentionMetadata(cu.to(dev), torch.tensor(ctx, dtype=torch.int32, device=dev),
                                 tables.to(dev), slots.to(dev), max(q_lens), max(ctx),
                                 max(q_lens) == 1, q_lens, ctx,
                                 num_decode_seqs=leading_decodes(q_lens))
        return ids.to(dev), pos.to(dev), meta
