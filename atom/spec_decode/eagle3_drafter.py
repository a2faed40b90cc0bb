"""specdecode=eagle3: an EAGLE-3 head (atom/models/eagle3.py) drafts from the target's low, mid
and high hidden states, in a KV pool of its own.

The target's residual stream at the inputs of its aux layers (2, L/2, L - 3 unless the head's
config names others) is captured during the target's forward by pre-hooks on those layers
(AuxCapture), so the target's model is unchanged, and leave that forward beside its hidden
states (`target_outputs`: a CUDA graph of the forward runs no hooks). After the step the head
catches up like MTP's next-n layer (drafter.next_tokens: position i reads the captured states
at i and the token after it), at the target's positions and slots in its own pool (the target's
block count, as the draft model's: draft_model_drafter.py), then decodes depths 2..k on its own
pre-norm output. Its
logits are over the target's vocabulary (ids outside its reduced one at -inf), so greedy and
sampled drafts and q are drafter.py's as they are.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.models.eagle3 import aux_layer_ids
from atom.spec_decode.draft_plan import CatchUpInputs, Stager
from atom.spec_decode.drafter import (CATCH_UP, DECODE, CaughtUp, Drafter, DraftForward,
                                      DraftStep, next_tokens)


class AuxCapture:
    """The target's residual stream at the inputs of the head's aux layers, from the last
    forward. Registered before the target's first forward (the KV profile's): a compiled
    forward traces the hooks only if they are there when it first runs."""

    def __init__(self, target: torch.nn.Module, head: torch.nn.Module) -> None:
        layers = target.model.layers
        self.ids = aux_layer_ids(head.hf_config, len(layers))
        self.captured: dict[int, torch.Tensor] = {}
        for i in set(self.ids):
            layers[i].register_forward_pre_hook(self._hook(i))

    def _hook(self, i: int) -> Callable:
        def hook(module: torch.nn.Module, args: tuple) -> None:
            _, x, residual = args  # a decoder layer's (positions, x, residual)
            self.captured[i] = x if residual is None else x + residual
        return hook

    def states(self) -> torch.Tensor:
        """[T, 3H] in the head's order."""
        return torch.cat([self.captured[i] for i in self.ids], -1)


class Eagle3Drafter(Drafter):
    def __init__(self, target: torch.nn.Module, head: torch.nn.Module, aux: AuxCapture, k: int,
                 block_size: int, max_model_len: int, kv_caches: list, kv_scales: list,
                 dtype: torch.dtype, stager: Stager) -> None:
        """dtype: the target's activations' (its captured states and the head's outputs)."""
        self.head, self.aux = head, aux
        self.embed = target.model.embed_tokens
        states = len(aux.ids) * int(target.hf_config.hidden_size)
        width = int(head.hf_config.hidden_size)
        super().__init__(k, block_size, max_model_len, int(head.vocab_size),
                         head.context.forward, kv_caches, kv_scales, stager,
                         {CATCH_UP: DraftForward(self._hidden, ((states, dtype),)),
                          DECODE: DraftForward(self._next, ((width, dtype),))})

    def target_outputs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The aux layers' inputs: the hooks keep them in Python, which a graph's replay does
        not run, so they leave the target's forward as an output."""
        return (self.aux.states(),)

    def _hidden(self, ids: torch.Tensor, positions: torch.Tensor,
                hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head.draft_hidden(positions, self.embed(ids), hidden)

    def _next(self, ids: torch.Tensor, positions: torch.Tensor,
              hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normed, pre = self._hidden(ids, positions, hidden)
        return self.head.compute_logits(normed), pre

    def _catch_up(self, step: DraftStep, inputs: CatchUpInputs) -> CaughtUp:
        (states,) = step.extras
        normed, pre = self._forward(CATCH_UP, next_tokens(step, inputs), step.positions,
                                    step.meta, states)
        if not step.rows:
            return CaughtUp(None, None, None)
        sel = inputs.last_idx
        return CaughtUp(None, self.head.compute_logits(normed.index_select(0, sel)),
                        pre.index_select(0, sel))

    def _decode(self, positions: torch.Tensor, tokens: torch.Tensor,
                state: Optional[torch.Tensor], meta: AttentionMetadata
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        assert state is not None
        logits, pre = self._forward(DECODE, tokens, positions, meta, state)
        return logits, pre
