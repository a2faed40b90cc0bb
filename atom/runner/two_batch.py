"""Two-batch overlap: a step that mixes decodes with a prefill chunk runs them as two halves on
two streams, the decodes' attention beside the prefill's projections.

Why: decode attention reads every context's KV once (bandwidth-bound, tensor cores idle) and a
prefill chunk's GEMMs are compute-bound; run one after the other, each leaves the other's resource
idle. Both halves run the same stages in the same order (projections, attention, projections, ...);
the prefill half runs one stage behind the decode half and a barrier after every stage keeps it
there, so decode attention always meets prefill projections (NanoFlow's nano-batches, on one GPU).
The price is that each half's GEMMs read the weights: a batch of decodes alone, split in two (~208
rows a half for the 8B), reads them in about the time it computes, and would lose what it gains, so
only mixed steps are split (NOTES.md has the arithmetic; `benchmarks/schedule_sim.py` the bound),
and steps mix when admissions are staggered (a small `scheduler.max_num_batched_tokens`). cuBLAS
GEMMs may hold every SM and leave the attention beside them nowhere to run;
`runtime.two_batch_carveout` makes the prefill half's GEMMs leave SMs free. Without a side stream
(CPU) the halves run one after the other: the same arithmetic, which the tests compare with the
plain forward.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from torch import nn

from atom.kernels.metadata import AttentionMetadata
from atom.runner import forward_context
from atom.runner.forward_context import ForwardContext


def _stages(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext,
            out: list[torch.Tensor]) -> Iterator[None]:
    """One half's forward through a Llama-family decoder (`embed_tokens`, `layers`, `norm`),
    pausing after each stage: embedding and layer 0's qkv; then per layer its attention, and its
    o_proj and MLP with the next layer's qkv (the final norm after the last)."""
    layers = model.layers
    qkv, residual = layers[0].project_qkv(model.embed_tokens(ids), None)
    yield
    for i, layer in enumerate(layers):
        with forward_context.forward_context(ctx):
            attn = layer.self_attn.attend(positions, qkv)
        yield
        x, residual = layer.finish(attn, residual)
        if i + 1 < len(layers):
            qkv, residual = layers[i + 1].project_qkv(x, residual)
        else:
            out.append(model.norm(x, residual)[0])
        yield


@contextmanager
def gemms_leave_sms(n: int) -> Iterator[None]:
    """GEMMs issued inside go through cuBLASLt targeting all but n SMs, so a kernel on the other
    stream finds SMs free instead of queueing behind a GEMM that holds every one (torch's
    experimental SM carveout; both settings are read when a GEMM is issued). CUDA only."""
    if n <= 0:
        yield
        return
    lib, carve = torch.backends.cuda.preferred_blas_library(), torch._C._get_sm_carveout_experimental()
    torch.backends.cuda.preferred_blas_library("cublaslt")
    torch._C._set_sm_carveout_experimental(n)
    try:
        yield
    finally:
        torch._C._set_sm_carveout_experimental(carve)
        torch.backends.cuda.preferred_blas_library(lib)


def _advance(stages: Iterator[None]) -> bool:
    """Runs the next stage; False when there was none left."""
    return next(stages, StopIteration) is not StopIteration


def two_batch_forward(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor, n: int,
                      ctx_a: ForwardContext, ctx_b: ForwardContext,
                      side: Optional[torch.cuda.Stream] = None, carveout: int = 0) -> torch.Tensor:
    """Hidden states [T, hidden] of a step whose tokens [0, n) and [n, T) have the attention
    contexts ctx_a and ctx_b; half b runs a stage behind, on `side` when given, its GEMMs
    leaving `carveout` SMs to half a's attention."""
    out_a: list[torch.Tensor] = []
    out_b: list[torch.Tensor] = []
    a = _stages(model, ids[:n], positions[:n], ctx_a, out_a)
    b = _stages(model, ids[n:], positions[n:], ctx_b, out_b)
    main = torch.cuda.current_stream() if side is not None else None
    _advance(a)  # a leads by one stage
    if side is not None:
        side.wait_stream(main)
    live = True
    while live:
        live = _advance(a)
        if side is None:
            live = _advance(b) or live
            continue
        with torch.cuda.stream(side), gemms_leave_sms(carveout):
            live = _advance(b) or live
        main.wait_stream(side)  # the barrier: neither half starts its next stage early
        side.wait_stream(main)
    if side is not None:
        out_b[0].record_stream(main)
    return torch.cat([out_a[0], out_b[0]])


class TwoBatchOverlap:
    """The runner's switch: which steps split, and the side stream they use."""

    def __init__(self, model: nn.Module, min_decodes: int, tail_counters: Optional[torch.Tensor],
                 device: torch.device, carveout: int = 0) -> None:
        self.model = model
        self.min_decodes = min_decodes
        self.carveout = carveout
        self.tail_counters = tail_counters
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None

    def applies(self, meta: AttentionMetadata) -> bool:
        """Mixed steps with enough leading decodes (a decode-only step never splits)."""
        return (not meta.is_decode and meta.num_decode_seqs >= self.min_decodes
                and meta.q_lens_cpu is not None and meta.context_lens_cpu is not None)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: list, kv_scales: list) -> torch.Tensor:
        head, tail = meta.split_decode_head(self.tail_counters)
        return two_batch_forward(self.model, ids, positions, head.num_seqs,
                                 ForwardContext(head, kv_caches, kv_scales),
                                 ForwardContext(tail, kv_caches, kv_scales), self.side,
                                 self.carveout)
