"""Trace labels for forward passes, with the attention FLOP aggregates of the spec's
ATOM_ENABLE_DETAILED_ANNOTATION=1: sqsq = Σ N_Q², sqsk = Σ N_Q·N_KV, sk = Σ N_KV over the
requests of one forward — the attention-quadratic terms a roofline needs beside GEMM FLOPs."""
from __future__ import annotations

import os
from contextlib import nullcontext
from typing import ContextManager, Sequence


def detailed() -> bool:
    return os.environ.get("ATOM_ENABLE_DETAILED_ANNOTATION") == "1"


def attention_terms(q_lens: Sequence[int], ctx_lens: Sequence[int]) -> tuple[int, int, int]:
    sqsq = sum(q * q for q in q_lens)
    sqsk = sum(q * k for q, k in zip(q_lens, ctx_lens))
    return sqsq, sqsk, sum(ctx_lens)


def forward_label(q_lens: Sequence[int], ctx_lens: Sequence[int], with_terms: bool) -> str:
    kind = "decode" if all(q == 1 for q in q_lens) else "prefill"
    label = f"{kind}[bs={len(q_lens)} tok={sum(q_lens)}"
    if with_terms:
        sqsq, sqsk, sk = attention_terms(q_lens, ctx_lens)
        label += f" sqsq={sqsq} sqsk={sqsk} sk={sk}"
    return label + "]"


def annotate(profiling: bool, q_lens: Sequence[int], ctx_lens: Sequence[int]) -> ContextManager:
    """A record_function around the forward while profiling with detailed annotation on;
    nothing otherwise (the label costs Python time on every step)."""
    if not (profiling and detailed()):
        return nullcontext()
    import torch

    return torch.profiler.record_function(forward_label(q_lens, ctx_lens, True))
