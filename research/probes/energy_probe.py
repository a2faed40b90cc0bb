"""What one output token of the 8B 1000 x 1k/1k run costs in joules, and what tok/s the H200's
power limit then allows.

Why: run 36 sampled the GPU through the whole bf16 run: 99.8% of it at the software power cap
(~693 W of 700), the SM clock at a median 1,545 MHz of 1,980. So the run is bound by energy,
not by the time its kernels take at full clock, and a ceiling has to be an energy one: tok/s =
(power limit - idle power) / (dynamic joules per token). Per token the run reads 201 MB of KV
(mean context 1,536) and does 15.0 GFLOP of decode GEMMs (at the run's ~384 rows) and 14.0 of
prefill GEMMs. Each is measured here at the shapes the run uses, sustained for a few seconds
with the GPU sampled (probe_kit.sustained):
- GEMMs: Llama-3.1-8B's four per layer, 4 layers' distinct weights, at 384, 1,024 and 8,192
  rows, and an 8192^3 product (the best case);
- KV reads: atom's decode attention at 416 x 1,536 (4 layers' caches), and a plain stream of the
  same bytes (the cheapest way to read them).
The ceiling counts idle power once, as if everything overlapped perfectly: the most any
schedule could get from this GPU at these kernels' energy per FLOP and per byte.

`--fp8` does the same for the fp8 run (issue 19: `quant=fp8 kv_cache=fp8`, 512 sequences a
step): the projections as e4m3 GEMMs (torch._scaled_mm, per-token x per-channel scales, what
atom runs at those rows) at 512 and 8,192 rows, the LM head in bf16 at 512 rows, and atom's
decode attention over an e4m3 cache at 512 x 1,536 beside a plain stream of the same bytes.

    python research/probes/energy_probe.py [--fp8] --out probe.json
    python research/probes/energy_probe.py --recompute probe.json   # the ceilings again, no GPU
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
import json
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import GpuSampler, decode_case, error_text, nvidia_smi, probe_meta, report, sustained
from sm_bandwidth_probe import _stream_plain
from sm_partition_probe import LAYERS, _gemms

HIDDEN, INTER, N_LAYERS, VOCAB, HQ, HK, D = 4096, 14336, 32, 128256, 32, 8, 128
BATCH, CTX = 416, 1536


def _layer_params() -> int:
    return HIDDEN * (HQ * D + 2 * HK * D) + HQ * D * HIDDEN + 3 * HIDDEN * INTER


def _per_token(kv_elem: int = 2) -> dict[str, float]:
    """The run's work per output token: KV bytes at the mean context, decode and prefill FLOPs
    (the decode ones without the LM head's, counted apart: it stays bf16 under quant=fp8)."""
    return {"kv_bytes": 2 * HK * D * kv_elem * N_LAYERS * CTX,
            "decode_flop": 2 * N_LAYERS * _layer_params(), "head_flop": 2 * HIDDEN * VOCAB,
            "prefill_flop": 2 * N_LAYERS * _layer_params()}


def _fp8_gemms(rows: int) -> Callable[[], None]:
    """_gemms' four GEMMs a layer in e4m3 through cuBLASLt row-wise scaling, LAYERS layers'
    distinct weights; the activations quantised once outside the timing."""
    hidden, inter, qkv = 4096, 14336, 32 * 128 + 2 * 8 * 128
    e4m3, f32 = torch.float8_e4m3fn, dict(device="cuda", dtype=torch.float32)
    ws = [[((torch.randn(n, k, device="cuda") * 0.02) / 0.002).to(e4m3) for n, k in
           ((qkv, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter))]
          for _ in range(LAYERS)]
    x, h = (torch.randn(rows, k, device="cuda").to(e4m3) for k in (hidden, inter))
    sx = torch.full((rows, 1), 0.01, **f32)

    def mm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(a, w.t(), scale_a=sx, scale_b=torch.full((1, w.shape[0]), 0.002, **f32),
                                out_dtype=torch.bfloat16)

    def run() -> None:
        for w in ws:
            mm(x, w[0]), mm(x, w[1]), mm(x, w[2]), mm(h, w[3])
    return run


def _head(rows: int) -> Callable[[], None]:
    """The LM head (bf16, 128k vocabulary) for `rows` tokens."""
    bf = dict(device="cuda", dtype=torch.bfloat16)
    w, x = torch.randn(VOCAB, HIDDEN, **bf) * 0.02, torch.randn(rows, HIDDEN, **bf)
    return lambda: x @ w.t()


def _square(n: int = 8192) -> Callable[[], None]:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return lambda: a @ b


def _costs(r: dict[str, Any], work: float, idle: float) -> None:
    """Joules per unit of work (FLOP or byte) in pJ: total, and above idle power (dynamic)."""
    s = r["sustained_ms"] * 1e-3
    r["pj_total"] = round(r["watts"] * s / work * 1e12, 4)
    r["pj_dynamic"] = round((r["watts"] - idle) * s / work * 1e12, 4)
    r["rate_sustained"] = round(work / s / 1e12, 2)  # TFLOP/s or TB/s


def _work(fp8: bool) -> dict[str, tuple[Callable[[], None], float]]:
    """What is timed: name → (the work, its units: FLOP or bytes)."""
    from atom.kernels.triton.paged_decode_attention import decode_attention

    batch = 512 if fp8 else BATCH
    work: dict[str, tuple[Callable[[], None], float]] = {}
    if fp8:
        for rows in (512, 8192):
            work[f"gemm_{rows}"] = (_fp8_gemms(rows), 2 * rows * LAYERS * _layer_params())
        work["head_512"] = (_head(512), 2 * 512 * HIDDEN * VOCAB)
    else:
        for rows in (384, 1024, 8192):
            work[f"gemm_{rows}"] = (_gemms(rows), 2 * rows * LAYERS * _layer_params())
    work["gemm_8192_cubed"] = (_square(), 2 * 8192 ** 3)
    kv = torch.float8_e4m3fn if fp8 else torch.bfloat16
    caches = [decode_case(batch, CTX, kv_dtype=kv) for _ in range(LAYERS)]
    outs = [torch.empty_like(c.q) for c in caches]
    work["attention"] = (lambda: [decode_attention(c.q, c.kc, c.vc, c.meta, D ** -0.5, out=o)
                                  for c, o in zip(caches, outs)],
                         LAYERS * caches[0].kv_bytes)
    rows = batch * HK * CTX
    k, v = (torch.randn(rows, D, device="cuda", dtype=torch.bfloat16).to(kv) for _ in range(2))
    sink = torch.empty(batch * HK, D, device="cuda", dtype=torch.float32)
    work["stream"] = (lambda: [_stream_plain[(batch * HK,)](k, v, sink, ROWS=CTX, BLOCK=64, D=D,
                                                            num_warps=4) for _ in range(LAYERS)],
                      LAYERS * 2 * k.numel() * k.element_size())
    return work


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--fp8", action="store_true", help="the fp8 weights + fp8 KV run's kernels")
    ap.add_argument("--recompute", default=None,
                    help="a saved result: its ceilings again from its measurements, no GPU")
    args = ap.parse_args()
    if args.recompute:
        with open(args.recompute) as f:
            res = json.load(f)
        _ceiling(res, "gemm_512" if res.get("fp8") else "gemm_384")
        print({k: v for k, v in res.items() if k.startswith("ceiling")})
        return
    torch.cuda.init()
    idle = float(GpuSampler.once()[1])
    res = probe_meta(idle_watts=idle, limit_watts=float(nvidia_smi("power.limit")[0]),
                     per_token=_per_token(1 if args.fp8 else 2), fp8=args.fp8)
    for name, (fn, units) in _work(args.fp8).items():
        try:
            res[name] = sustained(fn, seconds=3.0)
            _costs(res[name], units, idle)
        except Exception as e:
            res[name] = error_text(e, 300)
        print(name, res[name], flush=True)
    _ceiling(res, "gemm_512" if args.fp8 else "gemm_384")
    report("energy_probe", res, args.out)


def _ceiling(res: dict[str, Any], decode_gemm: str) -> None:
    """tok/s the power limit allows at the measured dynamic energies, with idle power counted
    once (perfect overlap), for the run's kernels (attention, the decode-size GEMMs and LM head,
    8,192-row prefill GEMMs) and for the cheapest measured (the stream, the cheapest GEMM a
    FLOP, the head included)."""
    t = res["per_token"]
    budget = res["limit_watts"] - res["idle_watts"]
    head = "head_512" if "head_512" in res else decode_gemm
    # The cheapest GEMM measured (under --fp8 the e4m3 ones cost less a FLOP than bf16's 8192^3).
    gemms = [k for k, v in res.items() if k.startswith("gemm_") and isinstance(v, dict)]
    best = min(gemms, key=lambda k: res[k]["pj_dynamic"], default="gemm_8192_cubed")
    for tag, read, dec, hd, pre in (("run_kernels", "attention", decode_gemm, head, "gemm_8192"),
                                    ("cheapest", "stream", best, best, best)):
        try:
            parts = {"kv": t["kv_bytes"] * res[read]["pj_dynamic"],
                     "decode_gemms": t["decode_flop"] * res[dec]["pj_dynamic"],
                     "head": t["head_flop"] * res[hd]["pj_dynamic"],
                     "prefill_gemms": t["prefill_flop"] * res[pre]["pj_dynamic"]}
            joules = sum(parts.values()) * 1e-12
            res[f"ceiling_{tag}_tok_s"] = round(budget / joules)
            res[f"ceiling_{tag}_mj_per_token"] = round(joules * 1e3, 2)
            res[f"ceiling_{tag}_mj_parts"] = {k: round(v * 1e-9, 2) for k, v in parts.items()}
        except (KeyError, TypeError):
            res[f"ceiling_{tag}_tok_s"] = None


if __name__ == "__main__":
    main()
