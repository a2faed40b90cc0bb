"""Why do decode attention and GEMMs on split SMs slow each other far beyond their share of SMs?

Why: run 28 (sm_partition_probe.py) found a 1,024-row prefill chunk's GEMMs on 84 SMs beside
416 decodes' attention on 48 taking 5.38 ms together, against 3.57 and 3.12 alone: 1.5x the
slower part, though together they need less than HBM's bandwidth. Two suspects, each measured
here while the work runs for a few seconds, with the GPU's SM clock, power and clock-event
reasons sampled by nvidia-smi:
- power: the GEMMs alone already hold the GPU at its power limit, so HBM traffic beside them
  would lower the SM clock for both (then no kernel or schedule can buy overlap);
- L2: an HBM stream beside the GEMMs evicting the tiles they reuse from L2. The same stream
  with `evict_first` loads (sm_bandwidth_probe's `_stream_plain`) would then slow them less.
Cases (N SMs for the stream or attention, the rest for the GEMMs, cuBLASLt told to leave N out):
GEMMs alone (all SMs; the rest), a plain stream, an evict_first stream and the bigpage attention
alone on N, each of the three beside the GEMMs, and attention then GEMMs in series on all SMs.

    python research/probes/overlap_power_probe.py --out probe.json
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import GpuSampler, error_text, on_streams, probe_meta, report, sustained
from sm_bandwidth_probe import _stream_plain, bigpage, bigpage_case
from sm_partition_probe import LAYERS, _gemms

N, ROWS = 48, 1024


def main() -> None:
    from torch.cuda.green_contexts import GreenContext

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = probe_meta(sms=sms, n=N, rows=ROWS, layers=LAYERS, query=GpuSampler.QUERY,
                     idle=GpuSampler.once())
    green = [GreenContext.create(num_sms=N, device_id=0),
             GreenContext.create(num_sms=sms - N, device_id=0)]  # held for the process: NOTES
    few, rest = green[0].Stream(), green[1].Stream()
    rows = 416 * 8 * 1536
    k, v = (torch.randn(rows, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    sink = torch.empty(416 * 8, 128, device="cuda", dtype=torch.float32)

    def stream(evict: str) -> Callable[[], None]:
        def run() -> None:
            for _ in range(LAYERS):
                _stream_plain[(416 * 8,)](k, v, sink, ROWS=1536, BLOCK=64, D=128, EVICT=evict,
                                          num_warps=4)
        return run
    attn_one = bigpage(bigpage_case(128, 416))

    def attn() -> None:
        for _ in range(LAYERS):
            attn_one()
    gemm_all, gemm_rest = _gemms(ROWS), _gemms(ROWS, N)
    cases: dict[str, Callable[[], None]] = {
        "gemm_all": gemm_all,
        "gemm_rest": on_streams((rest, gemm_rest)),
        "attn_all": attn,
        "serial_all": lambda: (attn(), gemm_all()),
        "stream_all": stream(""),
    }
    for tag, fn in (("stream", stream("")), ("stream_evict_first", stream("evict_first")),
                    ("attn", attn)):
        cases[f"{tag}_few"] = on_streams((few, fn))
        cases[f"{tag}_beside_gemm"] = on_streams((rest, gemm_rest), (few, fn))
    for name, fn in cases.items():
        try:
            res[name] = sustained(fn)
        except Exception as e:
            res[name] = error_text(e, 300)
        print(name, res[name], flush=True)
    res["stream_bytes"] = LAYERS * 2 * k.numel() * k.element_size()
    report("overlap_power_probe", res, args.out)


if __name__ == "__main__":
    main()
