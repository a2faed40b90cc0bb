"""Batch-1 GQA decode attention (Llama-3.1-8B's 32 / 8 heads), µs a layer, 32 layers' distinct
caches in one CUDA graph, by (splits, block_n, num_stages), bf16 and fp8 caches at 1k and 4k
contexts, beside a plain streaming read of the same K and V bytes (benchmarks/stream_read.py).

Why: taking decode attention out of the fp8 8B batch-1 step saves 0.325 ms of its 2.905 (10 µs
a layer for 2.3 MB of KV, H200.md run 119): the launch's latency, not its bytes. This asks
whether another split or tile shape at one sequence is shorter than today's default (`dflt`).

    python research/probes/decode_attn_bs1_sweep.py --out sweep.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

LAYERS = 32


def main() -> None:
    from triton.testing import do_bench

    from probe_kit import decode_case
    from stream_read import reader
    from atom.kernels.triton.paged_decode_attention import decode_attention

    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    configs = [(None, None, None)] + [(s, bn, st) for s in (8, 16, 32) for bn in (32, 64, 128)
                                      for st in (2, 3)]
    out: dict[str, object] = {}
    for tag, dtype in (("fp8", torch.float8_e4m3fn), ("bf16", torch.bfloat16)):
        for ctx in (1024, 4096):
            cases = [decode_case(1, ctx, kv_dtype=dtype) for _ in range(LAYERS)]
            q, meta, d = cases[0].q, cases[0].meta, cases[0].q.shape[-1]
            res = torch.empty_like(q)

            def graph_us(fn) -> float:
                fn()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                return round(do_bench(g.replay, warmup=10, rep=60, return_mode="median")
                             * 1e3 / LAYERS, 2)

            reads = [(reader(c.kc), reader(c.vc)) for c in cases]
            out[f"{tag}_{ctx}_read"] = graph_us(lambda: [r() for kv in reads for r in kv])
            for s, bn, st in configs:
                key = f"{tag}_{ctx}_" + ("dflt" if s is None else f"s{s}_n{bn}_st{st}")
                try:
                    out[key] = graph_us(lambda: [decode_attention(
                        q, c.kc, c.vc, meta, d ** -0.5, splits=s, block_n=bn, num_stages=st,
                        out=res) for c in cases])
                except Exception as e:  # a config that does not compile is a result too
                    out[key] = type(e).__name__
            del cases, reads
            print(json.dumps({k: v for k, v in out.items() if k.startswith(f"{tag}_{ctx}")}),
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
