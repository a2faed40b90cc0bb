"""DP attention's MLP step: the rows of every rank through one tensor/expert-parallel MLP.

Under DP attention (SGLang's and DeepSeek's serving layout) each rank runs the whole attention
over its own sequences, so its residual stream holds only its rows. The MLP or MoE block is
sharded as in tensor (or expert) parallelism, so it needs every rank's rows: they are gathered
([tp * T, H], T the step's largest per-rank row count, to which the runner pads every rank), run
through the block with its reduction left out, and reduce-scattered back, each rank keeping the
sum for its own rows. That is the all-reduce tensor parallelism would make over all the rows,
split in its two halves, with the attention's all-reduce gone.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from atom.layers.model_context import ModelContext
from atom.layers.norm import RMSNorm
from atom.layers.parallel_state import ParallelState


def mlp_step(mlp: nn.Module, norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor,
             ranks: Optional[ParallelState]) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's MLP call, (MLP(norm(x + residual)), x + residual): with `ranks` (DP
    attention's MLP ranks) over every rank's rows, gathered; else the MLP's own normed_forward
    (its norm fused into its first matmul where it can)."""
    if ranks is None:
        return mlp.normed_forward(norm, x, residual)
    return gathered_mlp(mlp, norm, x, residual, ranks)


def gathered_mlp(mlp: Callable[[torch.Tensor], torch.Tensor], norm: RMSNorm, x: torch.Tensor,
                 residual: torch.Tensor,
                 parallel: ParallelState) -> tuple[torch.Tensor, torch.Tensor]:
    """(MLP(norm(x + residual)) for this rank's rows, x + residual). `mlp` is built with
    reduce_results=False: its output is this rank's partial sum over all the gathered rows.
    The norm stays its own op (the gather sits between it and the MLP's first matmul)."""
    h, residual = norm(x, residual)
    return parallel.reduce_scatter_rows(mlp(parallel.all_gather_rows(h))), residual


def mlp_ranks(mc: ModelContext) -> Optional[ParallelState]:
    """The ranks a decoder layer gathers its MLP's rows over: DP attention's, else none."""
    return mc.parallel if mc.dp_attention else None
