"""The fp8 weight kernels (issue 19) against their peers, for gpu_bench's `fp8_kernels`:

- fp8_gemv at 1, 4 and 16 rows on Llama-3.1-8B's projections: GB/s of weight bytes against the
  4.18 TB/s copy, beside the bf16 GEMV (one row) or cuBLAS bf16 (more rows) over the same
  weights and torch._scaled_mm (per-tensor scales, x quantised ahead); plus a few block shapes
  of both inner products, to choose fp8_gemv._config from, and (one row) the fused
  residual-add + RMSNorm GEMV on the fp8 weight and on the bf16 one.
- fp8_block_gemm at M = 1 … 8192 on DeepSeek-V3's projections: µs and TFLOP/s, with and without
  its quantisation (at decode rows also without split-K and with a 16-row tile), beside
  torch._scaled_mm (per-tensor) and bf16 F.linear.
- fp8_scaled_gemm (per-channel weight, per-token x) at M = 16 … 8192 on the 8B projections,
  beside torch._scaled_mm's row-wise mode over the same operands and bf16 F.linear: the
  per-shape choice between the two fp8 GEMMs.
- rms_norm_quant against the norm kernel then the quantiser, per 128-group and per token, µs.

Every time is one CUDA graph of one call per weight set (gpu_bench._per_weight_ms, passed in),
the sets together larger than L2.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

COPY_BW = 4.18e12  # bytes/s, as gpu_bench.COPY_BW
L2_BYTES = 240e6  # weight bytes per shape: the sets exceed the H200's 60 MB L2 four times over

LLAMA8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
DEEPSEEK = {"q_a": (1536, 7168), "q_b": (24576, 1536), "kv_a": (576, 7168), "kv_b": (32768, 512),
            "o": (7168, 16384), "mlp_gate_up": (36864, 7168), "mlp_down": (7168, 18432),
            "expert_gate_up": (4096, 7168), "expert_down": (7168, 2048)}
# (dot, BLOCK_N, BLOCK_K, num_warps) per row count: fp8_gemv._config is chosen from these.
GEMV_SWEEP = {1: [(False, 8, 1024, 4), (False, 8, 1024, 8), (False, 16, 1024, 8),
                  (False, 4, 2048, 8), (False, 8, 2048, 8), (False, 16, 512, 4),
                  (False, 32, 512, 8), (False, 4, 4096, 8), (True, 32, 256, 4),
                  (True, 64, 256, 4)],
              4: [(True, 16, 256, 4), (True, 32, 256, 4), (True, 32, 512, 4), (True, 64, 256, 4)],
              16: [(True, 16, 256, 4), (True, 32, 256, 4), (True, 64, 256, 4), (True, 64, 128, 4)]}

BLOCK_ROWS = (1, 64, 256, 2048, 8192)
SCALED_ROWS = (16, 64, 256, 2048, 8192)

PerWeightMs = Callable[[Callable[[Any], Any], list], float]


def _sets(n: int, k: int, bytes_per: int) -> int:
    return max(2, min(64, int(L2_BYTES // (n * k * bytes_per))))


def _fp8_rows(n: int, k: int, sets: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-row e4m3 weights with their [N] fp32 scales (random codes: the bytes are what costs)."""
    out = []
    for _ in range(sets):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        out.append((w.to(torch.float8_e4m3fn), torch.rand(n, device="cuda") / 448 + 1e-4))
    return out


def _per_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().amax().float() / 448).clamp_min(1e-10)
    return (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def _scaled_mm(xq: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(xq, w.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)


def _timed(per_weight_ms: PerWeightMs, fn: Callable[[Any], Any], ws: list) -> float | str:
    """ms per call, or the error's text (a peer that refuses a shape must not stop the bench)."""
    try:
        return per_weight_ms(fn, ws)
    except Exception as e:  # noqa: BLE001 - recorded in the result beside the numbers
        return f"{type(e).__name__}: {str(e)[:120]}"


def _gbps(byts: int, ms: float | str) -> Any:
    return ms if isinstance(ms, str) else {"us": round(ms * 1e3, 2),
                                           "GBps": round(byts / (ms * 1e-3) / 1e9, 1),
                                           "of_copy": round(byts / (ms * 1e-3) / COPY_BW, 3)}


def bench_fp8_gemv(per_weight_ms: PerWeightMs) -> dict[str, Any]:
    from atom.kernels.triton.fp8_gemv import fp8_gemv
    from atom.kernels.triton.gemv import add_rms_norm_gemv, gemv

    out: dict[str, Any] = {}
    for name, (n, k) in LLAMA8B.items():
        fp8 = _fp8_rows(n, k, _sets(n, k, 1))
        one = torch.ones((), device="cuda")
        bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                for _ in range(_sets(n, k, 2))]
        for m in (1, 4, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            xq, xs = _per_tensor(x)
            row: dict[str, Any] = {
                "fp8_gemv": _gbps(n * k, _timed(per_weight_ms, lambda w: fp8_gemv(x, *w), fp8)),
                "scaled_mm": _gbps(n * k, _timed(per_weight_ms,
                                                 lambda w: _scaled_mm(xq, xs, w[0], one), fp8)),
                "bf16_peer": _gbps(2 * n * k, _timed(
                    per_weight_ms, (lambda w: gemv(x, w)) if m == 1
                    else (lambda w: torch.nn.functional.linear(x, w)), bf16)),
            }
            if m == 1:
                row["fp8_gemv_dot"] = _gbps(n * k, _timed(
                    per_weight_ms, lambda w: fp8_gemv(x, *w, dot=True), fp8))
                r, nw = torch.randn_like(x), torch.ones(k, device="cuda", dtype=torch.bfloat16)
                row["fp8_add_rms_norm_gemv"] = _gbps(n * k, _timed(
                    per_weight_ms, lambda w: add_rms_norm_gemv(x, r, nw, 1e-6, w[0], w_scale=w[1]),
                    fp8))
                row["bf16_add_rms_norm_gemv"] = _gbps(2 * n * k, _timed(
                    per_weight_ms, lambda w: add_rms_norm_gemv(x, r, nw, 1e-6, w), bf16))
            for dot, bn, bk, nw in GEMV_SWEEP[m]:
                row[f"{'dot_' if dot else ''}n{bn}k{bk}w{nw}"] = _gbps(n * k, _timed(
                    per_weight_ms, lambda w: fp8_gemv(x, *w, dot=dot, block_n=bn, block_k=bk,
                                                      num_warps=nw), fp8))
            out[f"gemv_8b_{name}_m{m}"] = row
        del fp8, bf16
        torch.cuda.empty_cache()
    return out


def _block_weights(n: int, k: int, sets: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    nb, kb = -(-n // 128), -(-k // 128)
    return [(torch.randn(n, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn),
             torch.rand(nb, kb, device="cuda") / 448 + 1e-4) for _ in range(sets)]


def _tflops(m: int, n: int, k: int, ms: float | str) -> Any:
    return ms if isinstance(ms, str) else {"us": round(ms * 1e3, 2),
                                           "TFLOPs": round(2 * m * n * k / (ms * 1e-3) / 1e12, 1)}


def bench_fp8_block_gemm(per_weight_ms: PerWeightMs) -> dict[str, Any]:
    from atom.kernels.triton.fp8_block_gemm import block_scaled_mm, fp8_block_gemm
    from atom.kernels.triton.fp8_quant import quant_per_token_group

    out: dict[str, Any] = {}
    for name, (n, k) in DEEPSEEK.items():
        fp8 = _block_weights(n, k, _sets(n, k, 1))
        one = torch.ones((), device="cuda")
        bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                for _ in range(_sets(n, k, 2))]
        for m in BLOCK_ROWS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            gq, gs = quant_per_token_group(x)
            tq, ts = _per_tensor(x)
            out[f"block_{name}_m{m}"] = {
                "fp8_block_gemm": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: fp8_block_gemm(x, *w), fp8)),
                "gemm_only": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: block_scaled_mm(gq, gs, *w), fp8)),
                "scaled_mm_per_tensor": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: _scaled_mm(tq, ts, w[0], one), fp8)),
                "bf16_linear": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: torch.nn.functional.linear(x, w), bf16)),
            }
            if m <= 64:  # decode: the alternatives to each default
                row = out[f"block_{name}_m{m}"]
                row["gemm_only_m16n64"] = _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: block_scaled_mm(gq, gs, *w, block_m=16, block_n=64),
                    fp8))
                row["gemm_only_unsplit"] = _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: block_scaled_mm(gq, gs, *w, split_k=1), fp8))
        del fp8, bf16
        torch.cuda.empty_cache()
    return out


def bench_fp8_scaled_gemm(per_weight_ms: PerWeightMs) -> dict[str, Any]:
    from atom.kernels.triton.fp8_quant import quant_per_token
    from atom.kernels.triton.fp8_scaled_gemm import fp8_scaled_gemm, scaled_mm

    out: dict[str, Any] = {}
    for name, (n, k) in LLAMA8B.items():
        fp8 = _fp8_rows(n, k, _sets(n, k, 1))
        bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                for _ in range(_sets(n, k, 2))]
        for m in SCALED_ROWS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            xq, xs = quant_per_token(x)
            out[f"scaled_8b_{name}_m{m}"] = {
                "fp8_scaled_gemm": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: fp8_scaled_gemm(x, *w), fp8)),
                "gemm_only": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: scaled_mm(xq, xs, *w), fp8)),
                "gemm_only_unsplit": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: scaled_mm(xq, xs, *w, split_k=1), fp8)),
                "scaled_mm_rowwise": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: torch._scaled_mm(
                        xq, w[0].t(), scale_a=xs, scale_b=w[1].view(1, -1),
                        out_dtype=torch.bfloat16), fp8)),
                "bf16_linear": _tflops(m, n, k, _timed(
                    per_weight_ms, lambda w: torch.nn.functional.linear(x, w), bf16)),
            }
        del fp8, bf16
        torch.cuda.empty_cache()
    return out


def bench_rms_norm_quant(per_weight_ms: PerWeightMs) -> dict[str, Any]:
    from atom.kernels.triton.fp8_quant import (quant_per_token, quant_per_token_group,
                                               rms_norm_quant)
    from atom.kernels.triton.rms_norm import fused_add_rms_norm

    out: dict[str, Any] = {}
    for k in (4096, 7168):
        w = torch.ones(k, device="cuda", dtype=torch.bfloat16)
        for m in (1, 64, 2048):
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            r = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            out[f"norm_quant_k{k}_m{m}_us"] = {
                label: round(ms * 1e3, 2) if not isinstance(ms, str) else ms
                for label, ms in {
                    "fused": _timed(per_weight_ms, lambda x: rms_norm_quant(x, r, w, 1e-6), xs),
                    "two_kernels": _timed(per_weight_ms, lambda x: quant_per_token_group(
                        fused_add_rms_norm(x, r, w, 1e-6)[0]), xs),
                    # one scale a row: what fp8_linear.add_rms_norm_linear runs
                    "fused_per_token": _timed(per_weight_ms, lambda x: rms_norm_quant(
                        x, r, w, 1e-6, group=None), xs),
                    "two_kernels_per_token": _timed(per_weight_ms, lambda x: quant_per_token(
                        fused_add_rms_norm(x, r, w, 1e-6)[0]), xs)}.items()}
    return out


def bench_fp8_kernels(per_weight_ms: PerWeightMs) -> dict[str, Any]:
    return {"gemv": bench_fp8_gemv(per_weight_ms), "block_gemm": bench_fp8_block_gemm(per_weight_ms),
            "scaled_gemm": bench_fp8_scaled_gemm(per_weight_ms),
            "rms_norm_quant": bench_rms_norm_quant(per_weight_ms)}
