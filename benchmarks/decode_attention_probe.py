"""How fast does each shape of atom's decode attention kernel read the KV cache, on the whole
H200 and on a fraction of its SMs?

Why: at the 8B throughput run's operating point (416 sequences at 1.5k context) the bf16 kernel
already reads at ~4.15 TB/s on all 132 SMs, but on N SMs it moves only ~50 GB/s per SM (run 15),
so it cannot leave SMs to GEMMs; and the fp8 kernel stops at ~2.9 TB/s on the whole GPU (run
17): both are bound by each SM's per-token work, not by HBM (run 19). The kernel's two layouts
(`tokens_as_m`): query heads as the dots' M dimension (GQA's 4 heads padded to 16 rows, mma.sync
through registers) or tokens as M (Sᵀ = K·Qᵀ, Oᵀ += Vᵀ·Pᵀ: 64+ row warpgroup MMAs reading K and
V from shared memory). For each layout and tile shape: TB/s of KV read on the whole GPU, then the
best of each on 16-64 SMs (CUDA green contexts), beside the same paged gather with no attention
(`loads_only`: what the loads alone allow on those SMs). Outputs are checked against the default
layout's.

    python benchmarks/decode_attention_probe.py --out probe.json
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable

import torch

from probe_kit import DecodeCase, decode_case, gather_sum, median_ms, on_streams, write_json

SM_COUNTS = (16, 32, 48, 64)


def _tb_s(case: DecodeCase, fn: Callable[[], Any], stream: torch.cuda.Stream) -> float:
    """TB/s of KV read by fn issued on `stream`, five calls per timing."""
    ms = median_ms(on_streams((stream, fn)), reps=10, inner=5)
    return round(case.kv_bytes / ms / 1e9, 2)


def _sweep(case: DecodeCase, tag: str, res: dict[str, Any]) -> dict[str, tuple]:
    """Whole-GPU TB/s per (layout, block_n, warps, stages); the best config of each layout."""
    from atom.kernels.triton.paged_decode_attention import decode_attention

    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    scale = q.shape[-1] ** -0.5
    ref = decode_attention(q, kc, vc, meta, scale).float()
    stream = torch.cuda.Stream()
    best: dict[str, tuple] = {}
    for layout in ("heads", "tokens"):
        for bn in (64, 128):
            for nw in (2, 4, 8):
                for st in (2, 3):
                    key = f"{tag}_{layout}_n{bn}_w{nw}_st{st}"
                    cfg = dict(block_n=bn, num_warps=nw, num_stages=st,
                               tokens_as_m=layout == "tokens")
                    try:
                        run = lambda: decode_attention(q, kc, vc, meta, scale, **cfg)  # noqa: E731
                        err = ((run().float() - ref).norm() / ref.norm()).item()
                        res[f"{key}_rel_err"] = round(err, 5)
                        res[key] = _tb_s(case, run, stream)
                    except Exception as e:  # a config that does not compile is a result too
                        res[key] = f"{type(e).__name__}: {str(e)[:160]}"
                        continue
                    if layout not in best or res[key] > best[layout][1]:
                        best[layout] = (cfg, res[key])
                    print(key, res[key], res[f"{key}_rel_err"], flush=True)
    return best


def _on_fewer_sms(case: DecodeCase, tag: str, best: dict[str, tuple], res: dict[str, Any]) -> None:
    from torch.cuda.green_contexts import GreenContext

    from atom.kernels.triton.paged_decode_attention import decode_attention

    q, kc, vc, meta = case.q, case.kc, case.vc, case.meta
    scale = q.shape[-1] ** -0.5
    loads = lambda: gather_sum(kc, vc, meta.context_lens, meta.block_tables)  # noqa: E731
    res[f"{tag}_loads_only_all_sms"] = _tb_s(case, loads, torch.cuda.Stream())
    for n in SM_COUNTS:
        try:
            green = GreenContext.create(num_sms=n, device_id=0)  # alive while its stream runs
            stream = green.Stream()
            res[f"{tag}_loads_only_{n}_sms"] = _tb_s(case, loads, stream)
            for layout, (cfg, _) in best.items():
                run = lambda: decode_attention(q, kc, vc, meta, scale, **cfg)  # noqa: E731
                res[f"{tag}_{layout}_best_{n}_sms"] = _tb_s(case, run, stream)
        except Exception as e:
            res[f"{tag}_{n}_sms_error"] = f"{type(e).__name__}: {str(e)[:200]}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=416)
    ap.add_argument("--ctx", type=int, default=1536)
    args = ap.parse_args()
    res: dict[str, Any] = {"commit": os.environ.get("ATOM_COMMIT", "unknown"),
                           "batch": args.batch, "ctx": args.ctx}
    for tag, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
        case = decode_case(args.batch, args.ctx, kv_dtype=dtype)
        best = _sweep(case, tag, res)
        res[f"{tag}_best"] = {k: [v[0], v[1]] for k, v in best.items()}
        _on_fewer_sms(case, tag, best, res)
        del case
        torch.cuda.empty_cache()
    print(f"== decode_attention_probe: {json.dumps(res)}", flush=True)
    write_json(res, args.out)


if __name__ == "__main__":
    main()
