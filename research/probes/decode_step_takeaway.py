"""The batch-1 decode graph's replay time with one of its kernels taken out (the backend's call
made a no-op before the graph is captured): what each part of a step costs in place, PDL overlap
and launch gaps included, which a profiler's per-kernel times (PDL waits inside them) do not say.

Why: with fp8 weights and KV Llama-3.1-8B's step replays in 2.99 ms (H200.md run 116). Its MLP
chain takes 53 µs a layer (run 118), the LM head ~0.25 ms, so ~32 µs a layer go to the
attention side (norm + qkv, rotary + KV store, decode attention, o), whose 42 MB of weights
would take 10 µs at the 4.18 TB/s copy. The outputs are wrong in every arm but `base`; only the time is read.

    python research/probes/decode_step_takeaway.py ARM [ARM ...]   # base no_rope no_attn no_quant no_norm_quant ...
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

EXTRA = ("quant=fp8", "kv_cache=fp8")


def _take_away(arm: str) -> None:
    from atom.kernels.triton_backend import TritonBackend

    if arm in ("no_rope", "no_rope_attn"):
        TritonBackend.rope_store_kv = lambda self, positions, q, *a, **k: q
    if arm in ("no_attn", "no_rope_attn"):
        TritonBackend.attention = lambda self, q, *a, **k: q
    if arm in ("no_quant", "no_norm_quant", "no_silu_quant"):
        # The W8A8 GEMVs' quantising kernels in front (fp8_quant, looked up at each call):
        # their outputs as unwritten buffers of the same shapes, so no kernel is launched.
        from atom.kernels.triton import fp8_quant

        e4m3, f32 = torch.float8_e4m3fn, torch.float32
        if arm != "no_silu_quant":
            fp8_quant.rms_norm_quant = lambda x, residual, weight, eps, group=128: (
                torch.empty(x.shape, dtype=e4m3, device=x.device),
                torch.empty((x.shape[0], 1), dtype=f32, device=x.device), x)
        if arm != "no_norm_quant":
            fp8_quant.silu_mul_quant = lambda x: (
                torch.empty((x.shape[0], x.shape[1] // 2), dtype=e4m3, device=x.device),
                torch.empty((x.shape[0], 1), dtype=f32, device=x.device))


def main() -> None:
    import gpu_bench as g

    for arm in sys.argv[1:]:
        _take_away(arm)
        eng = g.engine("llama3_8b", *EXTRA)
        eng.generate([list(range(100, 1124))], g._sp(max_tokens=4, temperature=0,
                                                      ignore_eos=True))
        print(json.dumps({"arm": arm, "replay_ms": g._replay_ms(eng),
                          "replay_ms_again": g._replay_ms(eng)}), flush=True)
        g.free(eng)
        del eng
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
