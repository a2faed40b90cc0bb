"""The `triton` kernel backend: the interface of backend.py served by atom.kernels.triton.*.

Importing this module imports triton; `get_backend("triton")` is the only caller, so CPU-only
installs without triton never pay for (or fail on) it.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from atom.kernels import torch_ref
from atom.kernels.backend import add_rms_norm_linear_unfused, rope_store_kv_unfused
from atom.kernels import fp8_choice
from atom.kernels.fp8_linear import Fp8Kernels
from atom.kernels.fp8_weight import Fp8Weight
from atom.kernels.metadata import AttentionMetadata
from atom.kernels.triton import (activation, blas_table, gemv, kv_store, mla_decode, mla_prefill,
                                 mla_rope_store, rms_norm, rope_kv_store, rotary)
from atom.kernels.triton.fused_moe import fused_moe
from atom.kernels.triton import paged_multi_query_attention as multi_query
from atom.kernels.triton.paged_decode_attention import decode_attention
from atom.kernels.triton.paged_prefill_attention import prefill_attention


FUSED_SILU_MAX_K = 4096
FUSED_NORM_MAX_N = 8192


class TritonBackend:
    name = "triton"

    def __init__(self) -> None:
        self._blas: Optional[blas_table.BlasTable] = None  # this GPU's, read at the first GEMM
        self._fp8 = Fp8Kernels.load()
        # Per-channel fp8 weight shapes prepared since the last weights_prepared, and then
        # (N, K) → the row buckets where the Triton GEMM beat cuBLASLt (fp8_choice.py).
        self._fp8_unchosen: dict[tuple[int, int], torch.device] = {}
        self._fp8_triton: dict[tuple[int, int], frozenset[int]] = {}
        # The W8A8 GEMV's split-K counters (fp8_mma_gemv.py): one per 64-row tile of the widest
        # fp8 weight, zero between calls; made at weights_prepared, before any graph capture.
        self._mma_counters: Optional[torch.Tensor] = None

    def prepare_weight(self, qw):
        """fp8 weights run as they are (fp8_linear.py); GGUF blocks have no CUDA kernel yet:
        the model dtype's dequantized weight."""
        if not isinstance(qw, Fp8Weight):
            return None
        if qw.weight_scale is not None and qw.qweight.is_cuda:
            self._fp8_unchosen[tuple(qw.shape)] = qw.qweight.device
        return qw.contiguous()

    def weights_prepared(self):
        """The multi-row fp8 GEMM of each new weight shape, timed (fp8_choice.py)."""
        shapes, self._fp8_unchosen = self._fp8_unchosen, {}
        if shapes and self._fp8.mma_gemv is not None:
            tiles = max(n for n, _ in shapes) // self._fp8.mma_gemv.BLOCK_N + 1
            if self._mma_counters is None or self._mma_counters.numel() < tiles:
                self._mma_counters = torch.zeros(tiles, dtype=torch.int32,
                                                 device=next(iter(shapes.values())))
        if shapes and self._fp8.scaled_gemm is not None:
            self._fp8_triton.update(fp8_choice.choose(set(shapes), self._fp8.gemm,
                                                      next(iter(shapes.values()))))

    def _fp8_takes_triton(self, x: torch.Tensor, w: Fp8Weight) -> bool:
        rows = x.numel() // x.shape[-1]
        return fp8_choice.bucket_of(rows) in self._fp8_triton.get(tuple(w.shape), ())

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return rms_norm.rms_norm(x, weight, eps)

    def fused_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return rms_norm.fused_add_rms_norm(x, residual, weight, eps)

    def rotary(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
               cos_sin_cache: torch.Tensor, is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return rotary.rotary(positions, q, k, cos_sin_cache, is_neox)

    def linear(self, x: torch.Tensor, weight: torch.Tensor,
               bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Single-row (batch-1 decode) linears through the Triton GEMV, +7% 8B and +16%
        Qwen3-0.6B single-request decode on the H200; F.linear otherwise, through the BLAS library
        this GPU's table names for the shape (blas_table.py). fp8 weights: fp8_linear.py."""
        if isinstance(weight, Fp8Weight):
            return self._fp8.linear(x, weight, bias, self._fp8_takes_triton(x, weight))
        if gemv.takes(x, weight):
            return gemv.gemv(x, weight, bias)
        if not x.is_cuda or torch.compiler.is_compiling():  # compile picks its own GEMMs
            return F.linear(x, weight, bias)
        if self._blas is None:
            self._blas = blas_table.load_table(torch.cuda.get_device_name(x.device))
        return blas_table.linear(x, weight, bias, self._blas)

    def block_output_linear(self, x: torch.Tensor, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.linear(x, weight, bias)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return activation.silu_and_mul(x)

    def silu_and_mul_linear(self, x: torch.Tensor, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One GEMV launch that applies the activation as it reads x, where the GEMV takes the
        linear (batch-1 decode) and K is short; the two kernels otherwise. Measured on the H200
        (decode_kernels, run D): Qwen3-0.6B down (K 3072) 4.73 µs fused vs 5.61 µs as two
        kernels, but Llama-3-8B down (K 14336) 40.4 vs 36.2 µs: there every program recomputing
        SiLU over the long row costs more than the launch it saves. fp8 weights alike, through
        the GEMV's per-channel scales (the thresholds are bf16's measurements); past the GEMV's
        rows the activation is quantized per token as it is computed (Fp8Kernels)."""
        if isinstance(weight, Fp8Weight):
            if (self._fp8.gemv_takes(x, weight) and gemv.takes(x, weight.qweight)
                    and weight.shape[1] <= FUSED_SILU_MAX_K):
                return gemv.gemv(x, weight.qweight, bias, silu_gate=True,
                                 **self._fp8.gemv_scale(weight))
            x2 = x.reshape(-1, x.shape[-1])
            fused = self._fp8.silu_and_mul_linear(x2, weight, bias,
                                                  self._fp8_takes_triton(x2, weight),
                                                  self._mma_counters)
            if fused is not None:
                return fused.view(*x.shape[:-1], weight.shape[0])
        elif gemv.takes(x, weight) and weight.shape[1] <= FUSED_SILU_MAX_K:
            return gemv.gemv(x, weight, bias, silu_gate=True)
        return self.linear(activation.silu_and_mul(x), weight, bias)

    def add_rms_norm_linear(self, x: torch.Tensor, residual: Optional[torch.Tensor],
                            norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        """The norm inside the projection's GEMV where the GEMV takes the row (batch-1 decode)
        and the projection is narrow: every program re-reads x, the residual and the norm
        weight, so the L2 traffic grows with the output rows. On the H200 (gpu_bench
        fused_gemv, µs fused vs two kernels): Qwen3-0.6B qkv 4.48 vs 4.93, gate_up 5.73 vs
        6.05 (16-row blocks), Llama-3-8B qkv 16.78 vs 17.5 (16-row blocks), but 8B gate_up
        (28,672 rows) 65.5 vs 63.7. The norm kernel and the GEMV otherwise. fp8 weights: the
        norm quantizes its output for the fp8 GEMM where that applies (Fp8Kernels), else the
        unfused ops."""
        if isinstance(weight, Fp8Weight):
            if (self._fp8.gemv_takes(x, weight) and gemv.takes(x, weight.qweight)
                    and weight.shape[0] <= FUSED_NORM_MAX_N):
                return gemv.add_rms_norm_gemv(x, residual, norm_weight, eps, weight.qweight, bias,
                                              **self._fp8.gemv_scale(weight))
            fused = self._fp8.add_rms_norm_linear(x, residual, norm_weight, eps, weight, bias,
                                                  self._fp8_takes_triton(x, weight),
                                                  self._mma_counters)
            if fused is not None:
                return fused
        elif gemv.takes(x, weight) and weight.shape[0] <= FUSED_NORM_MAX_N:
            return gemv.add_rms_norm_gemv(x, residual, norm_weight, eps, weight, bias)
        return add_rms_norm_linear_unfused(self, x, residual, norm_weight, eps, weight, bias)

    def fused_moe(self, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  weights: torch.Tensor, experts: torch.Tensor,
                  w13_scale: Optional[torch.Tensor] = None,
                  w2_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Two grouped GEMMs over expert-sorted blocks, no host sync: captured in the decode
        graphs like every other op of this backend. fp8 experts through the same kernel."""
        return fused_moe(x, w13, w2, weights, experts, w13_scale=w13_scale, w2_scale=w2_scale)

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: float,
                 v_scale: float) -> None:
        kv_store.store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)

    def rope_store_kv(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, k_scale: float, v_scale: float,
                      cos_sin_cache: torch.Tensor, is_neox: bool,
                      q_norm_weight: Optional[torch.Tensor] = None,
                      k_norm_weight: Optional[torch.Tensor] = None,
                      norm_eps: float = 0.0) -> torch.Tensor:
        """One launch for full-width rotary (every model we serve). Partial rotary takes the
        unfused ops, on copies of q and k because this backend's rotary works in place and the
        fused kernel writes no input (what a functional torch.compile op needs)."""
        rest = (v, k_cache, v_cache, slot_mapping, k_scale, v_scale, cos_sin_cache, is_neox,
                q_norm_weight, k_norm_weight, norm_eps)
        if cos_sin_cache.shape[-1] == q.shape[-1]:
            return rope_kv_store.rope_store_kv(positions, q, k, *rest)
        return rope_store_kv_unfused(self, positions, q.clone(), k.clone(), *rest)

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float, k_scale: float, v_scale: float,
                  sliding_window: Optional[int] = None) -> torch.Tensor:
        """Decode-only batches take the split-KV kernel (the CUDA-graph path); anything with a
        query longer than one token takes the varlen prefill kernel, except the batch's leading
        one-query sequences: through the prefill kernel each q head re-reads its KV (4x the
        bytes on Llama-3-8B), which made the decodes of mixed chunked-prefill steps slow. A
        batch of a few queries a sequence (speculative verifies, with or without one-query rows
        beside them) takes the multi-query kernel whole, split-KV with the group's heads sharing
        each KV read."""
        args = (scale, k_scale, v_scale, sliding_window)
        if meta.is_decode:
            return decode_attention(q, k_cache, v_cache, meta, *args)
        if multi_query.takes(meta):
            return multi_query.multi_query_attention(q, k_cache, v_cache, meta, *args)
        if meta.num_decode_seqs == 0:
            return prefill_attention(q, k_cache, v_cache, meta, *args)
        n = meta.num_decode_seqs
        out = prefill_attention(q, k_cache, v_cache, meta, *args, first_seq=n)
        decode_attention(q[:n], k_cache, v_cache, meta.decode_head(), *args, out=out[:n])
        return out

    def mla_rope_store(self, positions: torch.Tensor, q_pe: torch.Tensor, k_pe: torch.Tensor,
                       kv_c: torch.Tensor, latent_cache: torch.Tensor, slot_mapping: torch.Tensor,
                       kv_scale: float, cos_sin_cache: torch.Tensor,
                       is_neox: bool) -> torch.Tensor:
        """One launch where rotary spans the rope dims (DeepSeek's); the reference otherwise."""
        if cos_sin_cache.shape[-1] == q_pe.shape[-1]:
            return mla_rope_store.mla_rope_store(positions, q_pe, k_pe, kv_c, latent_cache,
                                                 slot_mapping, kv_scale, cos_sin_cache, is_neox)
        return torch_ref.mla_rope_store(positions, q_pe, k_pe, kv_c, latent_cache, slot_mapping,
                                        kv_scale, cos_sin_cache, is_neox)

    def mla_prefill_attention(self, q: torch.Tensor, latent_cache: torch.Tensor,
                              meta: AttentionMetadata, kv_b_weight: torch.Tensor,
                              qk_nope_head_dim: int, scale: float, kv_scale: float,
                              first_seq: int = 0) -> torch.Tensor:
        return mla_prefill.mla_prefill_attention(q, latent_cache, meta, kv_b_weight,
                                                 qk_nope_head_dim, scale, kv_scale, first_seq,
                                                 linear=self.linear)

    def mla_decode_attention(self, q: torch.Tensor, latent_cache: torch.Tensor,
                             meta: AttentionMetadata, kv_lora_rank: int, scale: float,
                             kv_scale: float) -> torch.Tensor:
        return mla_decode.mla_decode_attention(q, latent_cache, meta, kv_lora_rank, scale,
                                               kv_scale)
