"""How fast does atom's decode attention read the KV cache, by cache layout, on the whole H200
and on a fraction of its SMs, beside the same paged gather with no attention (`loads_only`)?

Why: decode attention must reach HBM from fewer SMs before it can share the GPU with GEMMs (the
only route to 12k tok/s for the 8B bf16 run, results/H200.md), and the fp8 kernel stops at ~2.8
TB/s on the whole GPU. What the H200 said (416 sequences x 1,536 context, results/H200.md):
- run 20 (0f2ed99): the loads alone move only ~66 GB/s per SM in bf16 (1.13 TB/s on 16 SMs, 2.11
  on 32, 2.94 on 48, 3.54 on 64; 4.15 on all), the kernel ~80% of that; fp8 moves the same rows
  per second, so half the bytes (loads alone 2.9 TB/s on all SMs, the kernel 2.77). The per-SM
  limit is in the gather, not the softmax. The kernel with tokens as the dots' M (wgmma
  operands straight from shared memory) was slower than GQA's heads as M in every tile shape.
- runs 21-22 (101f032): neither storing each block head by head (`heads_outer`: one kv head's
  page one contiguous 4 KB run; loads alone 4.26 vs 4.09 bf16, 3.2 vs 2.9 fp8, the kernel within
  noise) nor running a sequence's kv heads in adjacent programs changed the kernel's rate.

    python research/probes/decode_attention_probe.py --out probe.json
"""
from __future__ import annotations

import sys
from pathlib import Path
import argparse
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # probe_kit
from probe_kit import (DecodeCase, decode_case, error_text, gather_sum, median_ms, on_streams,
                       probe_meta, report)

SM_COUNTS = (32, 48)
# (block_n, num_warps, num_stages): the defaults and run 20's best on all SMs
CONFIGS = {"bf16": [(64, 4, 2), (128, 4, 2)], "fp8": [(128, 4, 3), (64, 2, 3)]}


def _tb_s(case: DecodeCase, fn: Callable[[], Any], stream: torch.cuda.Stream) -> float:
    """TB/s of KV read by fn issued on `stream`, five calls per timing."""
    ms = median_ms(on_streams((stream, fn)), reps=10, inner=5)
    return round(case.kv_bytes / ms / 1e9, 2)


_GREEN: list = []  # a green context must outlive its stream's work: held for the process


def _streams() -> dict[str, torch.cuda.Stream]:
    from torch.cuda.green_contexts import GreenContext

    streams = {"all": torch.cuda.Stream()}
    for n in SM_COUNTS:
        _GREEN.append(GreenContext.create(num_sms=n, device_id=0))
        streams[str(n)] = _GREEN[-1].Stream()
    return streams


def _probe(case: DecodeCase, tag: str, ref: torch.Tensor, streams: dict[str, torch.cuda.Stream],
           res: dict[str, Any]) -> None:
    from atom.kernels.triton.paged_decode_attention import decode_attention

    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    scale = q.shape[-1] ** -0.5
    loads = lambda: gather_sum(kc, vc, meta.context_lens, meta.block_tables)  # noqa: E731
    for where, stream in streams.items():
        res[f"{tag}_loads_only_{where}"] = _tb_s(case, loads, stream)
    for bn, nw, st in CONFIGS[tag.split("_")[0]]:
        key = f"{tag}_n{bn}_w{nw}_st{st}"
        run = lambda: decode_attention(q, kc, vc, meta, scale, block_n=bn,  # noqa: E731
                                       num_warps=nw, num_stages=st)
        res[f"{key}_rel_err"] = round(((run().float() - ref).norm() / ref.norm()).item(), 5)
        for where, stream in streams.items():
            res[f"{key}_{where}"] = _tb_s(case, run, stream)
        print(key, {k: v for k, v in res.items() if k.startswith(key)}, flush=True)


def main() -> None:
    from atom.kernels.triton.paged_decode_attention import decode_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=416)
    ap.add_argument("--ctx", type=int, default=1536)
    args = ap.parse_args()
    res = probe_meta(batch=args.batch, ctx=args.ctx)
    streams = _streams()
    for dtag, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
        ref = None
        for ltag, heads_outer in (("tokens_outer", False), ("heads_outer", True)):
            torch.manual_seed(0)  # the same values in both layouts
            case = decode_case(args.batch, args.ctx, kv_dtype=dtype, heads_outer=heads_outer)
            if ref is None:
                ref = decode_attention(case.q, case.kc, case.vc, case.meta,
                                       case.q.shape[-1] ** -0.5).float()
            try:
                _probe(case, f"{dtag}_{ltag}", ref, streams, res)
            except Exception as e:
                res[f"{dtag}_{ltag}_error"] = error_text(e, 300)
            del case
            torch.cuda.empty_cache()
    report("decode_attention_probe", res, args.out)


if __name__ == "__main__":
    main()
