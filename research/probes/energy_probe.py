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

    python research/probes/energy_probe.py --out probe.json
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
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


def _per_token() -> dict[str, float]:
    """The run's work per output token: KV bytes at the mean context, decode and prefill FLOPs."""
    return {"kv_bytes": 2 * HK * D * 2 * N_LAYERS * CTX,
            "decode_flop": 2 * (N_LAYERS * _layer_params() + HIDDEN * VOCAB),
            "prefill_flop": 2 * N_LAYERS * _layer_params()}


def _square(n: int = 8192) -> Callable[[], None]:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return lambda: a @ b


def _costs(r: dict[str, Any], work: float, idle: float) -> None:
    """Joules per unit of work (FLOP or byte) in pJ: total, and above idle power (dynamic)."""
    s = r["sustained_ms"] * 1e-3
    r["pj_total"] = round(r["watts"] * s / work * 1e12, 4)
    r["pj_dynamic"] = round((r["watts"] - idle) * s / work * 1e12, 4)
    r["rate_sustained"] = round(work / s / 1e12, 2)  # TFLOP/s or TB/s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.cuda.init()
    idle = float(GpuSampler.once()[1])
    res = probe_meta(idle_watts=idle, limit_watts=float(nvidia_smi("power.limit")[0]),
                     per_token=_per_token())
    work: dict[str, tuple[Callable[[], None], float]] = {}
    for rows in (384, 1024, 8192):
        work[f"gemm_{rows}"] = (_gemms(rows), 2 * rows * LAYERS * _layer_params())
    work["gemm_8192_cubed"] = (_square(), 2 * 8192 ** 3)
    case = decode_case(BATCH, CTX)
    layer_caches = [case] + [decode_case(BATCH, CTX) for _ in range(LAYERS - 1)]
    from atom.kernels.triton.paged_decode_attention import decode_attention

    outs = [torch.empty_like(c.q) for c in layer_caches]
    work["attention"] = (lambda: [decode_attention(c.q, c.kc, c.vc, c.meta, D ** -0.5, out=o)
                                  for c, o in zip(layer_caches, outs)],
                         LAYERS * case.kv_bytes)
    rows = BATCH * HK * CTX
    k, v = (torch.randn(rows, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    sink = torch.empty(BATCH * HK, D, device="cuda", dtype=torch.float32)
    work["stream"] = (lambda: [_stream_plain[(BATCH * HK,)](k, v, sink, ROWS=CTX, BLOCK=64, D=D,
                                                            num_warps=4) for _ in range(LAYERS)],
                      LAYERS * 2 * k.numel() * k.element_size())
    for name, (fn, units) in work.items():
        try:
            res[name] = sustained(fn, seconds=3.0)
            _costs(res[name], units, idle)
        except Exception as e:
            res[name] = error_text(e, 300)
        print(name, res[name], flush=True)
    _ceiling(res)
    report("energy_probe", res, args.out)


def _ceiling(res: dict[str, Any]) -> None:
    """tok/s the power limit allows at the measured dynamic energies, with idle power counted
    once (perfect overlap), for the run's kernels (attention, 384-row decode GEMMs, 8,192-row
    prefill GEMMs) and for the cheapest measured (stream, 8192^3)."""
    t = res["per_token"]
    budget = res["limit_watts"] - res["idle_watts"]
    for tag, read, dec, pre in (("run_kernels", "attention", "gemm_384", "gemm_8192"),
                                ("cheapest", "stream", "gemm_8192_cubed", "gemm_8192_cubed")):
        try:
            joules = (t["kv_bytes"] * res[read]["pj_dynamic"] + t["decode_flop"] * res[dec]["pj_dynamic"]
                      + t["prefill_flop"] * res[pre]["pj_dynamic"]) * 1e-12
            res[f"ceiling_{tag}_tok_s"] = round(budget / joules)
            res[f"ceiling_{tag}_mj_per_token"] = round(joules * 1e3, 2)
        except (KeyError, TypeError):
            res[f"ceiling_{tag}_tok_s"] = None


if __name__ == "__main__":
    main()
