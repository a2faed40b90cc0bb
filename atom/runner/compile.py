"""runtime.level=3: the model forward through torch.compile (inductor), where it pays.

Levels as the spec numbers them: 0 eager; 1 and 2 CUDA graphs for decode (cuda_graphs.py);
3 also compiles the forward — what inductor can fuse. With the Triton kernel backend (the GPU
default) every op of the forward is already one Triton kernel and decode runs in CUDA graphs, so
inductor has nothing to fuse: compiled, the 0.6B decode ran 1.5% slower (953 vs 967 tok/s, no
PDL under torch.compile) and the start took 20-80 s longer. So with Triton kernels level 3
compiles nothing and runs as level 2; it compiles the forward of the torch kernel backend on CUDA,
whose norms, rotary and SiLU are chains of small torch ops (not measured: nobody serves it for
speed). Never on CPU, where
the torch reference backend is the oracle every test checks and an inductor build would cost each
engine start tens of seconds. `enforce_eager` turns it off like it turns off graphs.

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

from atom.config.schema import RuntimeConfig
from atom.layers.attention import PagedAttention
from atom.layers.attention_op import model_attention_op
from atom.layers.mla import MLAAttention
from atom.layers.moe import FusedMoE

ForwardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids, positions) → hidden
CompilerBackend = Union[str, Callable]  # what torch.compile(backend=...) takes


def compiles(rt: RuntimeConfig, device: torch.device, backend: str) -> bool:
    """Whether `compile_forward` compiles for this config, device and kernel backend."""
    return rt.level >= 3 and not rt.enforce_eager and device.type == "cuda" and backend == "torch"


def compile_forward(model: nn.Module, rt: RuntimeConfig, device: torch.device,
                    backend: str) -> ForwardFn:
    """The forward the runner calls (eager prefill and CUDA-graph capture alike): `model` itself
    unless `compiles`, else a compiled forward. Compiling is lazy: the first call traces."""
    if not compiles(rt, device, backend):
        return model
    return CompiledForward(model)


def describe_level(rt: RuntimeConfig, device: torch.device, backend: str, graphs: bool) -> str:
    """The start-up log line: what this level does here, and why not more."""
    if rt.enforce_eager or rt.level == 0 or device.type != "cuda":
        why = ("enforce_eager" if rt.enforce_eager else "level 0" if rt.level == 0
               else "CUDA graphs and torch.compile are GPU-only")
        return f"runtime.level={rt.level}: eager ({why})"
    parts = ["decode in CUDA graphs" if graphs else
             f"no CUDA graphs (the {backend} kernel backend cannot be captured)"]
    if compiles(rt, device, backend):
        parts.append("the forward torch.compiled (inductor; attention one opaque op)")
    elif rt.level >= 3:
        parts.append(f"no torch.compile: every op of the {backend} forward is already a kernel")
    return f"runtime.level={rt.level}: " + "; ".join(parts)


class CompiledForward:
    """`model(input_ids, positions)` through torch.compile, its attention layers behind an
    opaque op of the model's own (attention_op.py)."""

    def __init__(self, model: nn.Module, backend: CompilerBackend = "inductor") -> None:
        layers = {m.layer_idx: m for m in model.modules() if isinstance(m, PagedAttention)}
        op = model_attention_op(layers)
        for layer in layers.values():
            layer.compiled_op = op
        _run_eagerly(model, FusedMoE)
        _run_eagerly(model, MLAAttention)
        self.compiled = torch.compile(model, backend=backend)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # maybe_: dynamo specialises 1-token batches (their own graph); some torch versions
        # raise when a strictly marked dimension is specialised.
        torch._dynamo.maybe_mark_dynamic(input_ids, 0)
        torch._dynamo.maybe_mark_dynamic(positions, 0)
        return self.compiled(input_ids, positions)


def _run_eagerly(model: nn.Module, kind: type) -> None:
    """Keeps every `kind` submodule out of the traced graph: dynamo breaks the graph around it
    and runs it as plain Python, in eager as before."""
    for m in model.modules():
        if isinstance(m, kind):
            m.forward = torch.compiler.disable(m.forward)
