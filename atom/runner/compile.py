"""runtime.level=3: the model forward through torch.compile (inductor).

Levels as the spec numbers them: 0 eager; 1 and 2 CUDA graphs for decode (cuda_graphs.py);
3 also compiles the forward. Compilation is for the GPU only: on CPU, where the torch reference
backend is the oracle every test checks, an inductor build would cost each engine start tens of
seconds and gain nothing. `enforce_eager` turns it off like it turns off graphs.

One compiled graph serves every batch: the token dimension of the inputs is dynamic, so prefill
lengths and CUDA-graph capture sizes share it (dynamo specialises size 1, a second graph).
Attention stays opaque (attention_op.py), so nothing per-step reaches dynamo's guards; so do
mixture-of-experts blocks, whose expert loop takes its sizes from the routing (a host copy of a
tensor): traced, every new routing would be a guard and a recompile until dynamo gave up; and
MLA layers, which read the forward context and loop over its sequences on the host.
"""
from __future__ import annotations

from typing import Callable, Union

import torch
from torch import nn

from atom.config.schema import Config
from atom.layers.attention import PagedAttention
from atom.layers.attention_op import bound_layers
from atom.layers.mla import MLAAttention
from atom.layers.moe import FusedMoE

ForwardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids, positions) → hidden
CompilerBackend = Union[str, Callable]  # what torch.compile(backend=...) takes


def compiles(cfg: Config, device: torch.device) -> bool:
    """Whether `compile_forward` compiles for this config on this device."""
    rt = cfg.runtime
    return rt.level >= 3 and not rt.enforce_eager and device.type == "cuda"


def compile_forward(model: nn.Module, cfg: Config, device: torch.device) -> ForwardFn:
    """The forward the runner calls (eager prefill and CUDA-graph capture alike): `model` itself
    unless `compiles`, else a compiled forward. Compiling is lazy: the first call traces."""
    if not compiles(cfg, device):
        return model
    return CompiledForward(model)


class CompiledForward:
    """`model(input_ids, positions)` through torch.compile, its attention layers bound for the
    custom op to resolve while it runs."""

    def __init__(self, model: nn.Module, backend: CompilerBackend = "inductor") -> None:
        self.layers = {m.layer_idx: m for m in model.modules() if isinstance(m, PagedAttention)}
        _run_eagerly(model, FusedMoE)
        _run_eagerly(model, MLAAttention)
        self.compiled = torch.compile(model, backend=backend)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # maybe_: dynamo specialises 1-token batches (their own graph); some torch versions
        # raise when a strictly marked dimension is specialised.
        torch._dynamo.maybe_mark_dynamic(input_ids, 0)
        torch._dynamo.maybe_mark_dynamic(positions, 0)
        with bound_layers(self.layers):
            return self.compiled(input_ids, positions)


def _run_eagerly(model: nn.Module, kind: type) -> None:
    """Keeps every `kind` submodule out of the traced graph: dynamo breaks the graph around it
    and runs it as plain Python, in eager as before."""
    for m in model.modules():
        if isinstance(m, kind):
            m.forward = torch.compiler.disable(m.forward)
