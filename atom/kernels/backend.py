"""One interface per op; each backend (named in `_BACKENDS`) implements it.

`torch` is the reference (runs on CPU, the oracle in tests); `triton` is the CUDA/ROCm fast path;
`aiter` is ROCm-only and optional. Tensor layouts (all backends):
  hidden x: [T, H]; q: [T, Hq, D]; k, v: [T, Hk, D]
  KV cache (one layer): k_cache, v_cache: [num_blocks, block_size, Hk, D], dtype = model dtype or
  float8_e4m3fn, in which case the stored value is x / scale (per-tensor scale, a float).
  cos_sin_cache: [max_position, rot_dim] — first half cos, second half sin.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Optional, Protocol

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.kernels.quantized_weight import Quantized


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

    def block_output_linear(self, x: torch.Tensor, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """linear(x, weight, bias) for a block's last projection (attention's o_proj), whose
        output is only ever added to the residual stream: a backend may return it in its
        compute dtype, which that add promotes."""

    def prepare_weight(self, qw: Quantized) -> Optional[Any]:
        """qw in the form this backend's linear takes in place of a weight tensor, or None: no
        kernel for it here, so the layer runs on qw dequantized (the float oracle). An
        Fp8Weight is taken by every backend (the torch ones emulate its GEMM)."""

    def weights_prepared(self) -> None:
        """Every weight of the model has been through prepare_weight: a backend that picks
        kernels by timing them over the whole model does it here."""

    def silu_and_mul_linear(self, x: torch.Tensor, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """linear(silu_and_mul(x), weight, bias): a gated MLP's down projection, which a backend
        may fuse with the activation (one launch instead of two at batch-1 decode)."""

    def add_rms_norm_linear(self, x: torch.Tensor, residual: Optional[torch.Tensor],
                            norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        """What add_rms_norm_linear_unfused defines: a pre-norm block's norm and its first
        projection, which a backend may fuse (one launch instead of two at batch-1 decode)."""

    def fused_moe(self, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  weights: torch.Tensor, experts: torch.Tensor,
                  w13_scale: Optional[torch.Tensor] = None,
                  w2_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The routed experts of one MoE layer: x [T, H]; w13 [E, 2I, H] (gate rows, then up
        rows); w2 [E, H, I]; weights [T, k] float32 and experts [T, k] (distinct per token),
        the router's choice → Σ_k weight · w2[e] · silu_and_mul(w13[e] · x), [T, H] in x's
        dtype, before any tensor-parallel all-reduce. An expert id of E marks a pair whose
        expert another rank holds (expert parallelism): it adds nothing and costs no GEMM.
        With scales, w13 and w2 are e4m3 codes (expert_quant.py: per output channel [E, N]
        or per 128 × 128 block [E, N/128, K/128]) and each GEMM's input is quantized
        dynamically, per token (and 128 columns with block scales), as fp8_reference.py
        defines."""

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, k_scale: float, v_scale: float) -> None: ...

    def rope_store_kv(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, k_scale: float, v_scale: float,
                      cos_sin_cache: torch.Tensor, is_neox: bool,
                      q_norm_weight: Optional[torch.Tensor] = None,
                      k_norm_weight: Optional[torch.Tensor] = None,
                      norm_eps: float = 0.0) -> torch.Tensor:
        """Everything between the qkv projection and attention, as rope_store_kv_unfused defines
        it. Returns the rotated q; k goes only to the cache. Writes nothing but the caches (q, k
        and v are views of the qkv output, and atom::paged_attention is declared functional)."""

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float, k_scale: float, v_scale: float,
                  sliding_window: Optional[int] = None) -> torch.Tensor:
        """Causal attention of q over the paged cache (new tokens already stored). → [T, Hq, D]."""

    def mla_rope_store(self, positions: torch.Tensor, q_pe: torch.Tensor, k_pe: torch.Tensor,
                       kv_c: torch.Tensor, latent_cache: torch.Tensor, slot_mapping: torch.Tensor,
                       kv_scale: float, cos_sin_cache: torch.Tensor,
                       is_neox: bool) -> torch.Tensor:
        """MLA's step between the projections and attention: rotates q_pe [T, H, R] and the
        shared k_pe [T, R], stores [kv_c | rotated k_pe] (kv_c [T, L], already normed) into the
        latent cache [num_blocks, block_size, L + R]. Returns the rotated q_pe."""

    def mla_prefill_attention(self, q: torch.Tensor, latent_cache: torch.Tensor,
                              meta: AttentionMetadata, kv_b_weight: torch.Tensor,
                              qk_nope_head_dim: int, scale: float, kv_scale: float,
                              first_seq: int = 0) -> torch.Tensor:
        """MLA without absorption, for sequences first_seq.. of meta (q holds their tokens from
        row 0): each one's cached latents are up-projected through kv_b_weight [H * (N + V), L]
        into per-head keys (N nope dims + the shared R rope dims) and values, and q [T, H, N + R]
        attends causally. → [T, H, V]."""

    def mla_decode_attention(self, q: torch.Tensor, latent_cache: torch.Tensor,
                             meta: AttentionMetadata, kv_lora_rank: int, scale: float,
                             kv_scale: float) -> torch.Tensor:
        """MLA with W_UK absorbed into q: multi-query attention of q [T, H, L + R] over the latent
        cache (keys: the whole latent; values: its first L dims), causal within each sequence's
        queries, any q_len per sequence. → [T, H, L], still to be multiplied by W_UV."""


def rope_store_kv_unfused(be: KernelBackend, positions: torch.Tensor, q: torch.Tensor,
                          k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                          v_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: float,
                          v_scale: float, cos_sin_cache: torch.Tensor, is_neox: bool,
                          q_norm_weight: Optional[torch.Tensor] = None,
                          k_norm_weight: Optional[torch.Tensor] = None,
                          norm_eps: float = 0.0) -> torch.Tensor:
    """What rope_store_kv means, in the backend's single ops: per-head RMSNorm of q and k when
    weights are given (Qwen3), rotary, then k and v into the cache. The torch reference is exactly
    this; fused backends fall back to it for shapes their kernel does not take."""
    if q_norm_weight is not None:
        q, k = be.rms_norm(q, q_norm_weight, norm_eps), be.rms_norm(k, k_norm_weight, norm_eps)
    q, k = be.rotary(positions, q, k, cos_sin_cache, is_neox)
    be.store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    return q


def add_rms_norm_linear_unfused(be: KernelBackend, x: torch.Tensor,
                                residual: Optional[torch.Tensor], norm_weight: torch.Tensor,
                                eps: float, weight: torch.Tensor,
                                bias: Optional[torch.Tensor] = None
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(linear(rms_norm(h)), h) with h = x + residual, or x itself without a residual (the first
    layer): h is the residual stream the block's output is added to next."""
    if residual is None:
        h, normed = x, be.rms_norm(x, norm_weight, eps)
    else:
        normed, h = be.fused_add_rms_norm(x, residual, norm_weight, eps)
    return be.linear(normed, weight, bias), h


# Each backend by module and class, imported only when chosen: the triton backend's module
# imports Triton and compiles nothing until called, but a CPU run should not pay for the import.
_BACKENDS: dict[str, tuple[str, str]] = {
    "torch": ("atom.kernels.torch_ref", "TorchBackend"),
    "cpu": ("atom.kernels.cpu_backend", "CpuBackend"),
    "triton": ("atom.kernels.triton_backend", "TritonBackend"),
}


def resolve_backend_name(requested: str, device: torch.device) -> str:
    """`auto`: triton on a GPU (CUDA or ROCm), cpu on a CPU (torch is its float32 oracle). aiter is taken only when asked for
    by name, and no aiter kernels exist yet (see get_backend)."""
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "cpu"
    return "triton" if importlib.util.find_spec("triton") is not None else "torch"


def get_backend(name: str) -> KernelBackend:
    if name == "aiter":
        try:
            import aiter  # noqa: F401
        except Exception as e:  # pragma: no cover - only on ROCm
            raise RuntimeError("aiter backend needs ROCm (import aiter failed: %s)" % e) from e
        raise NotImplementedError("the aiter kernel backend is not implemented yet; "
                                  "use runtime.kernels=triton on ROCm")  # pragma: no cover
    if name not in _BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; known: {sorted(_BACKENDS)}")
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()
