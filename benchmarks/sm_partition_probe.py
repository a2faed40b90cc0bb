"""Can decode attention and a prefill chunk's GEMMs share the H200 if each gets its own SMs?

Why: the 12k tok/s goal for the 8B run is above one H200's serial roofline, so it needs the
decodes' attention (bandwidth) to run beside GEMMs (compute). Put on two plain streams, the two
barely overlapped (gpu_bench's overlap_probe at 92a7626, run 13: 3.80 ms against 3.99 ms
serial; cuBLAS's SM carveout did not help, and that probe is gone with the two-batch code):
every attention CTA and every GEMM CTA wants a whole SM. CUDA green contexts split the SMs
between streams outright. This measures, for each split (N SMs for the attention, the rest for
the GEMMs):
  attn_N_ms     the attention alone on N SMs (its TB/s says how many SMs the KV read needs)
  gemm_rest_ms  the GEMMs alone on the other SMs
  pair_N_ms     both at once, each on its own SMs
against serial_ms (both, one after the other, on every SM). A pair well under serial_ms is the
overlap a mixed step could get; a pair near it says SM partitioning cannot pay either.
Run 15 (af12e84): the attention's bandwidth grows ~linearly with its SMs (0.85 TB/s on 16, 2.4
on 48, 3.7 on 80, 4.0 on all 132), so every split is slower than serial (best 6.05 vs 4.88 ms).

    python benchmarks/sm_partition_probe.py --out probe.json
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable

import torch

from probe_kit import decode_case, error_text, median_ms, on_streams, report


def _attention(batch: int, ctx: int, layers: int) -> tuple[Callable[[], None], float]:
    """`layers` decode-attention calls over one layer's cache (past L2); and its bytes."""
    from atom.kernels.triton.paged_decode_attention import decode_attention

    case = decode_case(batch, ctx)
    out = torch.empty_like(case.q)

    def run() -> None:
        for _ in range(layers):
            decode_attention(case.q, case.kc, case.vc, case.meta, case.q.shape[-1] ** -0.5, out=out)
    return run, float(case.kv_bytes * layers)


def _gemms(rows: int, layers: int) -> tuple[Callable[[], None], float]:
    """Llama-3.1-8B's four GEMMs per layer for `rows` tokens; and their FLOPs."""
    hidden, inter, qkv = 4096, 14336, 32 * 128 + 2 * 8 * 128
    bf = dict(device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(n, k, **bf) * 0.02 for n, k in
          ((qkv, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter))]
    x, h = torch.randn(rows, hidden, **bf), torch.randn(rows, inter, **bf)

    def run() -> None:
        for _ in range(layers):
            x @ ws[0].t(), x @ ws[1].t(), x @ ws[2].t(), h @ ws[3].t()
    return run, 2.0 * rows * sum(w.numel() for w in ws) * layers


def probe(batch: int, ctx: int, rows: int, layers: int, splits: list[int]) -> dict[str, Any]:
    from torch.cuda.green_contexts import GreenContext

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    attn, kv_bytes = _attention(batch, ctx, layers)
    gemm, flops = _gemms(rows, layers)
    out: dict[str, Any] = {"sms": sms, "decodes": batch, "ctx": ctx, "prefill_rows": rows,
                           "layers": layers, "attn_ms": median_ms(attn), "gemm_ms": median_ms(gemm)}
    out["serial_ms"] = round(out["attn_ms"] + out["gemm_ms"], 3)
    out["attn_tb_s"] = round(kv_bytes / out["attn_ms"] / 1e9, 2)
    out["gemm_tflops"] = round(flops / out["gemm_ms"] / 1e9, 1)
    out["pair_plain_streams_ms"] = median_ms(on_streams((torch.cuda.Stream(), gemm),
                                                        (torch.cuda.Stream(), attn)))
    for n in splits:
        try:
            a_ctx = GreenContext.create(num_sms=n, device_id=0)
            g_ctx = GreenContext.create(num_sms=sms - n, device_id=0)
            a_stream, g_stream = a_ctx.Stream(), g_ctx.Stream()
        except Exception as e:  # an SM count the driver rounds away, or no green contexts
            out[f"split_{n}_error"] = error_text(e)
            continue
        a_ms = median_ms(on_streams((a_stream, attn)))
        g_ms = median_ms(on_streams((g_stream, gemm)))
        out[f"attn_{n}_ms"], out[f"attn_{n}_tb_s"] = a_ms, round(kv_bytes / a_ms / 1e9, 2)
        out[f"gemm_rest_{n}_ms"] = g_ms
        out[f"pair_{n}_ms"] = median_ms(on_streams((g_stream, gemm), (a_stream, attn)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"commit": os.environ.get("ATOM_COMMIT", "unknown"),
                               "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    # The 8B run's mixed step: ~400 decodes at ~1.5k context beside a 1024-token prefill chunk;
    # and a shorter-context point where the GEMMs dominate.
    for name, args_ in (("decode400_ctx1536_prefill1024", (400, 1536, 1024, 4)),
                        ("decode400_ctx512_prefill1024", (400, 512, 1024, 4))):
        try:
            results[name] = probe(*args_, splits=[16, 32, 48, 64, 80])
        except Exception as e:
            results[name] = {"error": error_text(e)}
    report("sm_partition_probe", results, args.out)


if __name__ == "__main__":
    main()
