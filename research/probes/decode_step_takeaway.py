"""The batch-1 decode graph's replay time with one of its kernels taken out (the backend's call
made a no-op before the graph is captured), or with empty PDL kernels put in: what each part of
a step costs in place, PDL overlap and launch gaps included, which a profiler's per-kernel times
(PDL waits inside them) do not say.

Why: with fp8 weights and KV Llama-3.1-8B's step replays in 2.86 ms (H200.md run 125) against a
floor of 1.95 for the same bytes in a kernel an operation (decode_step_floor.py). Taking decode
attention out saves 0.325 ms, rotary + KV store nothing (run 119). Whether fusing a kernel away
pays depends on what a kernel boundary costs in this chain: `plus_noop` puts one empty PDL
kernel (wait, then release the next) after each layer's rotary, `plus_noop2` two, so their
difference from `base` over 32 layers is that cost. Outputs are wrong in every arm that takes a
kernel out; only the time is read. `attn_s{S}_n{N}_w{W}_st{T}`: decode attention at one
sequence at S splits of N-token tiles, W warps, T stages, in place of its defaults (16, 128, 4,
3). `parts_*`: decode attention at one sequence as decode_attn_parts.py's copy, `parts_full`
whole, `parts_no_merge+no_kv` etc. with those parts out. Arms run in one process, each on its
own engine, the patched functions put back after it. (A `late` arm, every kernel releasing the
next only as it ends, is at 99eb022: 9% slower, benchmarks/results/H200.md.)

    python research/probes/decode_step_takeaway.py ARM [ARM ...]
      # base no_rope no_attn no_rope_attn no_quant no_norm_quant no_silu_quant plus_noop plus_noop2
"""
from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Iterator

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

EXTRA = ("quant=fp8", "kv_cache=fp8")


def _noop(device: torch.device) -> None:
    _empty_pdl[(1,)](**pdl_args(device))


@triton.jit
def _empty_pdl(PDL: tl.constexpr):
    pdl_wait(PDL)


@contextlib.contextmanager
def _patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _one_sequence_decode(stack: contextlib.ExitStack, backend: type, fn) -> None:
    """backend.attention with fn(q, k_cache, v_cache, meta, scale, k_scale, v_scale,
    sliding_window) for the decode steps of one sequence (the bs=1 graph, the one timed); the
    backend's own everywhere else."""
    attention = backend.attention

    def patched(self, q, k_cache, v_cache, meta, scale, k_scale, v_scale, sliding_window=None):
        args = (q, k_cache, v_cache, meta, scale, k_scale, v_scale, sliding_window)
        if not meta.is_decode or q.shape[0] != 1:
            return attention(self, *args)
        return fn(*args)
    stack.enter_context(_patched(backend, "attention", patched))


ARMS = ("base", "no_rope", "no_attn", "no_rope_attn", "no_quant", "no_norm_quant",
        "no_silu_quant", "plus_noop", "plus_noop2")


def _take_away(arm: str, stack: contextlib.ExitStack) -> None:
    if arm not in ARMS and not re.fullmatch(r"attn_s\d+_n\d+_w\d+_st\d+|parts_[a-z_+]+", arm):
        raise SystemExit(f"unknown arm {arm!r}: a typo would time the step as it is")
    from atom.kernels.triton import fp8_quant
    from atom.kernels.triton_backend import TritonBackend

    if arm in ("no_rope", "no_rope_attn"):
        stack.enter_context(_patched(TritonBackend, "rope_store_kv",
                                     lambda self, positions, q, *a, **k: q))
    if arm in ("no_attn", "no_rope_attn"):
        stack.enter_context(_patched(TritonBackend, "attention", lambda self, q, *a, **k: q))
    if arm in ("plus_noop", "plus_noop2"):
        rope, n = TritonBackend.rope_store_kv, 1 if arm == "plus_noop" else 2

        def rope_then_noop(self, positions, q, *a, **k):
            out = rope(self, positions, q, *a, **k)
            for _ in range(n):
                _noop(q.device)
            return out
        stack.enter_context(_patched(TritonBackend, "rope_store_kv", rope_then_noop))
    tiles = re.fullmatch(r"attn_s(\d+)_n(\d+)_w(\d+)_st(\d+)", arm)
    if tiles:
        from atom.kernels.triton.paged_decode_attention import decode_attention

        s, n, w, st = map(int, tiles.groups())
        _one_sequence_decode(stack, TritonBackend, lambda *args: decode_attention(
            *args, splits=s, block_n=n, num_warps=w, num_stages=st))
    if arm.startswith("parts_"):  # parts_full, parts_no_merge, parts_no_kv+no_merge, ...
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from decode_attn_parts import attention_parts

        flags = frozenset() if arm == "parts_full" else frozenset(
            f.upper() for f in arm[len("parts_"):].split("+"))
        _one_sequence_decode(stack, TritonBackend, lambda *args: attention_parts(
            *args[:7], flags))
    if arm in ("no_quant", "no_norm_quant", "no_silu_quant"):
        # The W8A8 GEMVs' quantising kernels in front (fp8_quant, looked up at each call):
        # their outputs as unwritten buffers of the same shapes, so no kernel is launched.
        e4m3, f32 = torch.float8_e4m3fn, torch.float32
        if arm != "no_silu_quant":
            stack.enter_context(_patched(
                fp8_quant, "rms_norm_quant", lambda x, residual, weight, eps, group=128: (
                    torch.empty(x.shape, dtype=e4m3, device=x.device),
                    torch.empty((x.shape[0], 1), dtype=f32, device=x.device), x)))
        if arm != "no_norm_quant":
            stack.enter_context(_patched(fp8_quant, "silu_mul_quant", lambda x: (
                torch.empty((x.shape[0], x.shape[1] // 2), dtype=e4m3, device=x.device),
                torch.empty((x.shape[0], 1), dtype=f32, device=x.device))))


def main() -> None:
    import gpu_bench as g

    for arm in sys.argv[1:]:
        with contextlib.ExitStack() as stack:
            _take_away(arm, stack)
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
