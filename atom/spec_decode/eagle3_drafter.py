"""specdecode=eagle3: an EAGLE-3 head (atom/models/eagle3.py) drafts from the target's low, mid
and high hidden states, in a KV pool of its own.

The target's residual stream at the inputs of its aux layers (2, L/2, L - 3 unless the head's
config names others) is captured during the target's forward by pre-hooks on those layers, so
the target's forward is unchanged. After the step the head catches up like MTP's next-n layer
(drafter.next_tokens: position i reads the captured states at i and the token after it), at
the target's positions and slots in its own pool (the target's block count, as the draft
model's: draft_model_drafter.py), then decodes depths 2..k on its own pre-norm output. Its
logits are over the target's vocabulary (ids outside its reduced one at -inf), so greedy and
sampled drafts and q are drafter.py's as they are.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext
from atom.models.eagle3 import aux_layer_ids
from atom.spec_decode.drafter import (CaughtUp, Drafter, DraftStep, ScheduledRequest, last_kept,
                                      next_tokens)


class Eagle3Drafter(Drafter):
    def __init__(self, target: torch.nn.Module, head: torch.nn.Module, k: int, block_size: int,
                 max_model_len: int, kv_caches: list, kv_scales: list,
                 split_counters: torch.Tensor) -> None:
        super().__init__(k, block_size, max_model_len)
        self.head, self.slot = head, head.context.forward
        self.embed = target.model.embed_tokens
        self.kv_caches, self.kv_scales, self.split_counters = kv_caches, kv_scales, split_counters
        layers = target.model.layers
        self.aux_ids = aux_layer_ids(head.hf_config, len(layers))
        self._captured: dict[int, torch.Tensor] = {}  # layer index → its input, last forward
        for i in set(self.aux_ids):
            layers[i].register_forward_pre_hook(self._capture(i))

    def _capture(self, i: int) -> Callable:
        def hook(module: torch.nn.Module, args: tuple) -> None:
            _, x, residual = args  # a decoder layer's (positions, x, residual)
            self._captured[i] = x if residual is None else x + residual
        return hook

    def _catch_up(self, reqs: list[ScheduledRequest], step: DraftStep,
                  kept: dict[int, list[int]]) -> CaughtUp:
        aux = torch.cat([self._captured[i] for i in self.aux_ids], -1)
        normed, pre = self._run(step.positions, next_tokens(reqs, step, kept), aux, step.meta)
        if not step.rows:
            return CaughtUp([], None, None, None)
        last_idx, last_pos = last_kept(reqs, step, kept)
        sel = torch.tensor(last_idx, device=pre.device)
        return CaughtUp(last_pos, None, self.head.compute_logits(normed.index_select(0, sel)),
                        pre.index_select(0, sel))

    def _decode(self, positions: torch.Tensor, tokens: torch.Tensor,
                state: Optional[torch.Tensor], meta: AttentionMetadata
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        assert state is not None
        normed, pre = self._run(positions, tokens, state, meta)
        return self.head.compute_logits(normed), pre

    def _run(self, positions: torch.Tensor, ids: torch.Tensor, hidden: torch.Tensor,
             meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        meta = dataclasses.replace(meta, split_counters=self.split_counters)
        with self.slot.using(ForwardContext(meta, self.kv_caches, self.kv_scales)):
            return self.head.draft_hidden(positions, self.embed(ids), hidden)
