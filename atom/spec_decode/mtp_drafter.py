"""The MTP drafter: the runner-side proposer that runs DeepSeek's next-n layer after each step.

After the target's forward and verification, the next-n layer (atom/models/deepseek_mtp.py)
runs over every token of the step at the target's positions and slots, so its KV cache layer
holds, at position i, what the target's hidden state at i and the token after it give:
- positions inside a chunk read the next input token, and a chunk's last position the prompt
  token after it (`ScheduledRequest.next_token`);
- a row's sampled positions read the tokens the row kept (its accepted drafts, then the token
  after them); positions past a rejection read the last kept token.
From each sampling row's last kept position the layer gives the first draft; drafts 2..k run
the same layer one position at a time with its own output as the next hidden state (vLLM and
SGLang reuse R1's single layer the same way). The loop, sampling and q are drafter.py's.

The layer is queued in the launch right behind the step's sampling, on the kept tokens the
device decided (verdict.py), so the host reads nothing of the step before the drafts. Known
approximations, which cost acceptance and never exactness: a prefix-cache hit
reuses the layer's KV of the shared blocks (each block's last position written with the token
that followed it in the sequence that computed it), and a draft position past the sequence's
blocks (the scheduler adds the k - 1 slots past a step's tokens only from free blocks) ends that
row's drafts early.
"""
from __future__ import annotations

from typing import Optional

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.spec_decode.draft_plan import CatchUpInputs, Stager
from atom.spec_decode.drafter import (CATCH_UP, DECODE, CaughtUp, Drafter, DraftForward,
                                      DraftStep, next_tokens)


class MTPDrafter(Drafter):
    def __init__(self, model: torch.nn.Module, k: int, block_size: int, max_model_len: int,
                 kv_caches: list, kv_scales: list, dtype: torch.dtype, stager: Stager) -> None:
        """kv_caches, kv_scales: the target's (its pool holds the layer);
        dtype: the target's hidden states'."""
        self.layer = model.mtp
        self.embed = model.model.embed_tokens
        state = ((int(model.hf_config.hidden_size), dtype),)
        # The target's slot: the layer is one of the model's.
        super().__init__(k, block_size, max_model_len, int(model.hf_config.vocab_size),
                         model.context.forward, kv_caches, kv_scales, stager,
                         {CATCH_UP: DraftForward(self._hidden, state),
                          DECODE: DraftForward(self._next, state)})

    def _hidden(self, ids: torch.Tensor, positions: torch.Tensor,
                hidden: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.layer.draft_hidden(positions, self.embed(ids), hidden),)

    def _next(self, ids: torch.Tensor, positions: torch.Tensor,
              hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (y,) = self._hidden(ids, positions, hidden)
        return self.layer.compute_logits(y), y

    def _catch_up(self, step: DraftStep, inputs: CatchUpInputs) -> CaughtUp:
        (y,) = self._forward(CATCH_UP, next_tokens(step, inputs), step.positions, step.meta,
                             step.hidden)
        if not step.rows:
            return CaughtUp(None, None, None)
        y = y.index_select(0, inputs.last_idx)
        return CaughtUp(None, self.layer.compute_logits(y), y)

    def _decode(self, positions: torch.Tensor, tokens: torch.Tensor,
                state: Optional[torch.Tensor], meta: AttentionMetadata
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        assert state is not None
        logits, y = self._forward(DECODE, tokens, positions, meta, state)
        return logits, y
