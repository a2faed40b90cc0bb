"""Programmatic dependent launch (PDL, Hopper and later) for the decode-path kernels.

A batch-1 decode step is ~200-300 short kernels in one CUDA graph, and between two of them the
GPU drains one grid before it starts the next. Launched with PDL, a kernel's programs may be
scheduled while its predecessor's last programs still run; each one waits (griddepcontrol.wait)
for the predecessor to finish and its writes to land before it touches memory that kernel may
have written, so results are unchanged and only the launch gap overlaps. Every PDL kernel
waits in every program, so the guarantee chains: when a kernel passes its wait, all earlier
kernels are complete. Memory no kernel of the step writes may be read before the wait: the
weight GEMVs (gemv.py, fp8_mma_gemv.py) load their first weight tile there.

On by default where it can be; ATOM_TRITON_PDL=0 turns it off. gpu_bench `decode_*_nopdl` is the
A/B (on the H200, graph replay with PDL off -> on: Qwen3-0.6B 0.965 -> 0.876 ms,
Llama-3-8B 4.485 -> 4.334 ms).
"""
from __future__ import annotations

import functools
import os
from typing import Any

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    HAS_GDC = True
except ImportError:  # a Triton without grid-dependency control: PDL stays off
    gdc_launch_dependents = gdc_wait = None
    HAS_GDC = False


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """Wait for the previous kernel, then let the next one be scheduled (it waits in turn).
    Released only as each kernel ends instead, the 8B fp8 batch-1 step replays 9% slower
    (research/probes/decode_step_takeaway.py's `late` arm, at commit 99eb022)."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@functools.lru_cache(maxsize=8)
def _capable(device_index: int) -> bool:
    major, _ = torch.cuda.get_device_capability(device_index)
    return major >= 9 and torch.version.hip is None


def pdl_args(device: torch.device) -> dict[str, Any]:
    """Launch kwargs for one launch on `device`: the kernel's PDL constexpr, and Triton's
    launch_pdl option when PDL is on. Off on CPU (interpreter), before Hopper, on ROCm, inside
    torch.compile (its Triton wrapper takes no launch options), or with ATOM_TRITON_PDL=0."""
    if (device.type != "cuda" or not HAS_GDC or os.environ.get("ATOM_TRITON_PDL") == "0"
            or torch.compiler.is_compiling() or not _capable(device.index or 0)):
        return {"PDL": False}
    return {"PDL": True, "launch_pdl": True}
