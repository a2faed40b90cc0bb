"""Can decode attention and GEMMs share the H200 if each gets its own SMs?

Why: the 12k tok/s goal for the 8B run is above one H200's serial roofline, so it needs the
decodes' attention (bandwidth) to run beside GEMMs (compute). Put on two plain streams, the two
barely overlapped (run 13: 3.80 ms against 3.99 serial): every attention CTA and every GEMM CTA
wants a whole SM. CUDA green contexts split the SMs between streams outright. For each split (N
SMs for the attention, the rest for the GEMMs) this measures the attention alone on its N SMs,
the GEMMs alone on the rest, and both at once, against the two in series on every SM:
- `beside_prefill`: 416 decodes' attention beside the GEMMs of a prefill chunk (mixed steps);
- `two_halves`: 208 decodes' attention beside the other 208's GEMMs, twice, against 416 of each
  in series (a decode step cut into two micro-batches; each half reads the weights again).
GEMMs run through cuBLAS, or through cuBLASLt told to leave the attention's N SMs out
(`torch._C._set_sm_carveout_experimental`): cuBLAS sizes its grids for all 132 SMs, so on fewer
it runs in extra waves. Attention is atom's kernel (16-token pages) or sm_bandwidth_probe's
`bigpage` kernel (128-token contiguous pages, TMA tiles: 3.4-4.0 TB/s on 48-64 SMs in run 27,
where atom's kernel reads 2.5-3.1).
Run 15 (af12e84, atom's kernel, cuBLAS): the attention's bandwidth grew ~linearly with its SMs
(0.85 TB/s on 16, 2.4 on 48, 3.7 on 80, 4.0 on all 132) and every split was slower than serial
(best 6.05 vs 4.88 ms); the GEMMs on 116 SMs took 3.66 ms against 2.35 on all.
Run 28 (ffcc849): with bigpage too every pair is 14-26% slower than serial (a 416-row chunk
beside 416 decodes on 48 SMs: 4.17 ms against 3.64; two halves on 64 SMs: 2 x 2.29 against
3.64): the two slow each other down far beyond their share of SMs, so it is not the attention
kernel that stops overlap on this GPU.

    python research/probes/sm_partition_probe.py --out probe.json
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import decode_case, error_text, median_ms, on_streams, probe_meta, report
from sm_bandwidth_probe import bigpage, bigpage_case

CTX, LAYERS, SPLITS = 1536, 4, (48, 64, 80)


def _attention(kind: str, batch: int) -> Callable[[], None]:
    """LAYERS decode-attention calls over one layer's cache of `batch` x CTX (past L2)."""
    from atom.kernels.triton.paged_decode_attention import decode_attention

    if kind == "bigpage":
        one = bigpage(bigpage_case(128, batch))
    else:
        case = decode_case(batch, CTX)
        out = torch.empty_like(case.q)
        one = lambda: decode_attention(case.q, case.kc, case.vc, case.meta,  # noqa: E731
                                       case.q.shape[-1] ** -0.5, out=out)

    def run() -> None:
        for _ in range(LAYERS):
            one()
    return run


def _gemms(rows: int, carveout: int | None = None) -> Callable[[], None]:
    """Llama-3.1-8B's four GEMMs per layer for `rows` tokens, LAYERS layers' distinct weights;
    through cuBLASLt leaving `carveout` SMs out when one is given."""
    hidden, inter, qkv = 4096, 14336, 32 * 128 + 2 * 8 * 128
    bf = dict(device="cuda", dtype=torch.bfloat16)
    ws = [[torch.randn(n, k, **bf) * 0.02 for n, k in
           ((qkv, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter))]
          for _ in range(LAYERS)]
    x, h = torch.randn(rows, hidden, **bf), torch.randn(rows, inter, **bf)

    def run() -> None:
        if carveout is not None:
            torch.backends.cuda.preferred_blas_library("cublaslt")
            torch._C._set_sm_carveout_experimental(carveout)
        for w in ws:
            x @ w[0].t(), x @ w[1].t(), x @ w[2].t(), h @ w[3].t()
        if carveout is not None:
            torch._C._set_sm_carveout_experimental(None)
            torch.backends.cuda.preferred_blas_library("cublas")
    return run


_GREEN: list = []  # a green context must outlive its stream's work: held for the process


def _split_streams(sms: int) -> dict[int, tuple[torch.cuda.Stream, torch.cuda.Stream]]:
    from torch.cuda.green_contexts import GreenContext

    out = {}
    for n in SPLITS:
        a, g = GreenContext.create(num_sms=n, device_id=0), GreenContext.create(num_sms=sms - n, device_id=0)
        _GREEN.extend((a, g))
        out[n] = (a.Stream(), g.Stream())
    return out


def _pairs(res: dict[str, Any], tag: str, attn: Callable[[], None], rows: int, streams) -> None:
    """Each split: attention alone on its N SMs, GEMMs alone on the rest (cuBLAS, and cuBLASLt
    with N SMs carved out), both at once."""
    for n, (a_stream, g_stream) in streams.items():
        res[f"{tag}_attn_{n}_ms"] = median_ms(on_streams((a_stream, attn)))
        for lib, gemm in (("cublas", _gemms(rows)), ("lt_carveout", _gemms(rows, n))):
            key = f"{tag}_{lib}_{n}"
            try:
                res[f"{key}_gemm_ms"] = median_ms(on_streams((g_stream, gemm)))
                res[f"{key}_pair_ms"] = median_ms(on_streams((g_stream, gemm), (a_stream, attn)))
            except Exception as e:
                res[f"{key}_error"] = error_text(e)
        print(tag, n, {k: v for k, v in res.items() if k.startswith(tag) and f"_{n}_" in k},
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = probe_meta(sms=sms, ctx=CTX, layers=LAYERS)
    streams = _split_streams(sms)
    res["gemm_416_ms"] = median_ms(_gemms(416))
    res["gemm_1024_ms"] = median_ms(_gemms(1024))
    for kind in ("atom", "bigpage"):
        try:
            full = _attention(kind, 416)
            res[f"{kind}_attn_416_ms"] = median_ms(full)
            res[f"{kind}_serial_416_ms"] = round(res[f"{kind}_attn_416_ms"] + res["gemm_416_ms"], 3)
            for rows in (416, 1024):
                _pairs(res, f"{kind}_beside_prefill{rows}", full, rows, streams)
            del full
            half = _attention(kind, 208)
            _pairs(res, f"{kind}_two_halves", half, 208, streams)
            del half
        except Exception as e:
            res[f"{kind}_error"] = error_text(e, 300)
        torch.cuda.empty_cache()
    report("sm_partition_probe", res, args.out)


if __name__ == "__main__":
    main()
