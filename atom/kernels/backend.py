"""One interface per op; backends register implementations.

`torch` is the reference (runs on CPU, the oracle in tests); `triton` is the CUDA/ROCm fast path;
`aiter` is ROCm-only and optional. Tensor layouts (all backends):
  hidden x: [T, H]; q: [T, Hq, D]; k, v: [T, Hk, D]
  KV cache (one layer): k_cache, v_cache: [num_blocks, block_size, Hk, D], dtype = model dtype or
  float8_e4m3fn, in which case the stored value is x / scale (per-tensor scale, a float).
  cos_sin_cache: [max_position, rot_dim] — first half cos, second half sin.
"""
from __future__ import annotations

from typing import Optional, Protocol

import torch

from atom.kernels.metadata import AttentionMetadata


class KernelBackend(Protocol):
    name: str

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...

    def fused_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""

    def rotary(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
               cos_sin_cache: torch.Tensor, is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """q: [T, Hq, D], k: [T, Hk, D]; rotates the first rot_dim of D; returns new or in-place."""

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, 2I] → silu(x[:, :I]) * x[:, I:]."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor,
               bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x @ weight.T + bias; a backend may take the single-row (batch-1 decode) case itself."""

    def qk_norm_rotary(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                       q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                       cos_sin_cache: torch.Tensor, is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head RMSNorm of q and k (Qwen3), then rotary over the whole head."""

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, k_scale: float, v_scale: float) -> None: ...

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float, k_scale: float, v_scale: float,
                  sliding_window: Optional[int] = None) -> torch.Tensor:
        """Causal attention of q over the paged cache (new tokens already stored). → [T, Hq, D]."""


_BACKENDS: dict[str, type] = {}


def register(name: str):
    def deco(cls: type) -> type:
        _BACKENDS[name] = cls
        return cls
    return deco


def resolve_backend_name(requested: str, device: torch.device) -> str:
    """`auto`: triton on a GPU (CUDA or ROCm), torch on CPU. aiter is taken only when asked for
    by name, and no aiter kernels exist yet (see get_backend)."""
    import importlib.util

    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "torch"
    return "triton" if importlib.util.find_spec("triton") is not None else "torch"


def get_backend(name: str) -> KernelBackend:
    if name == "torch":
        from atom.kernels import torch_ref  # noqa: F401  (registers)
    elif name == "triton":
        from atom.kernels import triton_backend  # noqa: F401
    elif name == "aiter":
        try:
            import aiter  # noqa: F401
        except Exception as e:  # pragma: no cover - only on ROCm
            raise RuntimeError("aiter backend needs ROCm (import aiter failed: %s)" % e) from e
        raise NotImplementedError("the aiter kernel backend is not implemented yet; "
                                  "use runtime.kernels=triton on ROCm")  # pragma: no cover
    if name not in _BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; known: {sorted(_BACKENDS)}")
    return _BACKENDS[name]()
