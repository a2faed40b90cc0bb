"""The floor of a batch-1 decode step built of one kernel an operation: Llama-3.1-8B's fp8 step
(32 layers of qkv, attention over the KV, o, gate_up, down, then the bf16 LM head) with every
kernel replaced by a plain streaming read of exactly the bytes it reads, launched in the step's
order in one CUDA graph, with and without PDL (the read's first block loaded before the wait,
as atom's GEMVs do); and the same bytes in one launch.

Why: issue 19 asks ≥ 440 tok/s (2.27 ms a step) at batch 1 with fp8 weights; atom's step
replays in 2.88 ms. Whether 440 is reachable with a kernel an operation, and how far each of
atom's kernels is from a read of its bytes, needs this floor measured, launch gaps included
(a layer's four projections read in turn without PDL took 59.3 µs against 53.6 in one launch).

    python research/probes/decode_step_floor.py [--ctx 1152] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_bench import _graph_ms as graph_ms  # noqa: E402

from atom.kernels.triton.pdl import pdl_args, pdl_wait  # noqa: E402

# Llama-3.1-8B: bytes a layer read at batch 1 with fp8 weights (e4m3 [N, K]) and an fp8 cache.
LAYERS = 32
PROJ = {"qkv": 6144 * 4096, "o": 4096 * 4096, "gate_up": 28672 * 4096, "down": 4096 * 14336}
HEAD = 128256 * 4096 * 2  # bf16
KV_PER_TOKEN = 8 * 128 * 2  # 8 kv heads, K and V, e4m3
PER_SM, BLOCK = 8, 1024


@triton.jit
def _read(x_ptr, o_ptr, n_words, per_prog, BLOCK: tl.constexpr, PDL: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * per_prog
    i = tl.arange(0, BLOCK)
    first = base + i
    acc = tl.load(x_ptr + first, mask=first < n_words, other=0)  # before the wait: weights
    pdl_wait(PDL)
    for start in range(BLOCK, per_prog, BLOCK):
        idx = base + start + i
        acc += tl.load(x_ptr + idx, mask=idx < n_words, other=0)
    tl.store(o_ptr + tl.program_id(0), tl.sum(acc, 0))


def _reader(x: torch.Tensor, sink: torch.Tensor, pdl: bool):
    words = x.view(torch.int32)
    progs = sink.numel()
    per = triton.cdiv(triton.cdiv(words.numel(), progs), BLOCK) * BLOCK
    kw = pdl_args(x.device) if pdl else {"PDL": False}
    return lambda: _read[(progs,)](words, sink, words.numel(), per, BLOCK=BLOCK, num_warps=8,
                                   **kw)


def _graph_ms(fns) -> float:
    """Median ms of one replay of the graph that launches `fns` in turn."""
    return graph_ms(lambda: [f() for f in fns])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=1152)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.empty(PER_SM * sms, device="cuda", dtype=torch.int32)
    kv = KV_PER_TOKEN * args.ctx
    u8 = dict(device="cuda", dtype=torch.uint8)
    layers = [{k: torch.randint(0, 255, (n,), **u8) for k, n in
               (*PROJ.items(), ("kv", kv))} for _ in range(LAYERS)]
    head = torch.randint(0, 255, (HEAD,), **u8)
    order = ("qkv", "kv", "o", "gate_up", "down")
    total = LAYERS * (sum(PROJ.values()) + kv) + HEAD
    res: dict[str, float] = {"bytes_GB": total / 1e9}
    for pdl in (False, True):
        fns = [_reader(t[k], sink, pdl) for t in layers for k in order]
        fns.append(_reader(head, sink, pdl))
        ms = _graph_ms(fns)
        res[f"chain_pdl{int(pdl)}_ms"] = round(ms, 4)
        res[f"chain_pdl{int(pdl)}_tok_s"] = round(1e3 / ms, 1)
        # Without the attention reads: what the weights alone cost in the chain.
        fns = [_reader(t[k], sink, pdl) for t in layers for k in order if k != "kv"]
        fns.append(_reader(head, sink, pdl))
        res[f"weights_chain_pdl{int(pdl)}_ms"] = round(_graph_ms(fns), 4)
        # One kernel a layer's weights (fused), the attention read between.
        fused = [torch.cat([t[k] for k in PROJ]) for t in layers[:1]]
        fns = [f for t in layers for f in (_reader(fused[0], sink, pdl), _reader(t["kv"], sink,
                                                                                 pdl))]
        fns.append(_reader(head, sink, pdl))
        res[f"layer_fused_pdl{int(pdl)}_ms"] = round(_graph_ms(fns), 4)
    whole = torch.cat([t[k] for t in layers[:8] for k in PROJ])  # 1.75 GB, read 4x + head
    ms = _graph_ms([_reader(whole, sink, False)] * 4 + [_reader(head, sink, False)])
    res["few_launches_ms"] = round(ms, 4)
    res["copy_limit_ms"] = round(total / 4.18e12 * 1e3, 4)
    res["goal_ms"] = round(1e3 / 440, 4)
    print(json.dumps(res), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
