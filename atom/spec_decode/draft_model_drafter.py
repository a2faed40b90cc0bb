"""specdecode=draft_model: a smaller model that shares the target's tokenizer drafts k tokens
autoregressively after each verified step, in its own KV cache.

The draft's pool has the target's block count and block size and is indexed by the target's
block tables and slots (runner_builder.py sizes both pools together), so the scheduler's one
block manager serves both: a block freed, shared by a prefix-cache hit or recomputed after
preemption is so for the draft too, and its KV there was written from the same tokens.
After the target's step the draft runs over the step's tokens at the step's positions (writing
its KV of every position, rejected drafts included: their slots lie past the sequence's kept
length and the next step writes them again before any query reads them), then decodes from
each sampling row's last kept token at its position, one position at a time, k times: slots up
to k past the step's tokens (`proposer.draft_lookahead`), from free blocks only, so a row
whose next position has no block gets fewer drafts (drafter.py has the loop and q).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F

from atom.config.schema import Config
from atom.kernels.metadata import AttentionMetadata
from atom.spec_decode.draft_plan import CatchUpInputs, Stager
from atom.spec_decode.drafter import (CATCH_UP, DECODE, CaughtUp, Drafter, DraftForward,
                                      DraftStep)


def draft_model_config(cfg: Config) -> Config:
    """The target's config with the draft checkpoint as its model: what the draft is loaded
    with (its dtype, quantization and load settings are the target's)."""
    model = dataclasses.replace(cfg.model, path=cfg.specdecode.draft_model, hf_config={},
                                tokenizer=None, pypi_wheel=None, pypi_member=None)
    return dataclasses.replace(cfg, model=model)


class DraftModelDrafter(Drafter):
    # Its catch-up runs the step's inputs, which never hold the last kept token (the target's
    # sample after them): the first draft takes a decode of that token.
    catch_up_drafts = False

    def __init__(self, model: torch.nn.Module, k: int, block_size: int, max_model_len: int,
                 kv_caches: list, kv_scales: list, vocab_size: int, stager: Stager) -> None:
        self.model = model
        # The target's and the draft's: validation admits different sizes only as paddings of
        # one tokenizer, so ids past either are no tokens.
        self.vocab_size, self.draft_vocab = vocab_size, int(model.hf_config.vocab_size)
        super().__init__(k, block_size, max_model_len, vocab_size, model.context.forward,
                         kv_caches, kv_scales, stager,
                         {CATCH_UP: DraftForward(self._hidden), DECODE: DraftForward(self._next)})

    def _catch_up(self, step: DraftStep, inputs: CatchUpInputs) -> CaughtUp:
        self._forward(CATCH_UP, step.input_ids, step.positions, step.meta)
        if not step.rows:
            return CaughtUp(None, None, None)
        return CaughtUp(inputs.last_token, None, None)

    def _decode(self, positions: torch.Tensor, tokens: torch.Tensor,
                state: Optional[torch.Tensor], meta: AttentionMetadata
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        (logits,) = self._forward(DECODE, tokens, positions, meta)
        return logits, None

    def _hidden(self, ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor]:
        if self.draft_vocab < self.vocab_size:  # a target id past the tokenizer's
            ids = ids.clamp(max=self.draft_vocab - 1)
        return (self.model(ids, positions),)

    def _next(self, ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor]:
        """The draft's logits cut or padded (-inf) to the target's vocabulary."""
        (hidden,) = self._hidden(ids, positions)
        logits = self.model.compute_logits(hidden)
        extra = self.vocab_size - logits.shape[-1]
        if extra < 0:
            logits = logits[:, :self.vocab_size]
        elif extra > 0:
            logits = F.pad(logits, (0, extra), value=float("-inf"))
        return (logits,)

