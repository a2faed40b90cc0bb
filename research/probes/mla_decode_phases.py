"""Where an MLA decode call's time goes at short contexts: the split kernel's and the merge
kernel's times (torch.profiler over eager calls), the call from a CUDA graph, and the call with a
merge that loads every split of a head at once.

Why: issue 21's benchmark at 16 heads reads ~4.0 TB/s at the margin (run 97: 64 × 4k → 8k adds
302 MB in 75 µs) but each call carries ~25–30 µs more than its bytes at that rate, which is what
holds 1k contexts at 37–68% of copy. The merge kernel sums the partials one split at a time,
one dependent load after another, 8 heads a program: at 64 sequences that is 128 programs of
32 serial loads. The variant merge is one program per (token, head) whose loads all issue
together (a [splits, 512] fp32 tile: 4 registers a thread per split at 4 warps). atom's merge
now loads chunks of 8 splits at once (run 101 was this probe before that change): the two arms
then compare those chunks against one tile of the splits' power of two.

    python research/probes/mla_decode_phases.py [--out FILE]
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
from gpu_bench import R1_LATENT, _graph_ms, _mla_decode_case  # noqa: E402

from atom.kernels.triton import mla_decode  # noqa: E402
from atom.kernels.triton.pdl import pdl_wait  # noqa: E402


@triton.jit(do_not_specialize=["n_splits"])
def _merge_at_once(mid_o_ptr, mid_lse_ptr, o_ptr, o_tok_stride, o_head_stride, n_heads,
                   n_splits, kv_scale, L: tl.constexpr, HEADS: tl.constexpr,
                   SPLIT_PAD: tl.constexpr, LORA: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, SPLIT_PAD)
    col = tl.arange(0, LORA)
    row = (tok * n_heads + head) * n_splits
    lse = tl.load(mid_lse_ptr + row + s, mask=s < n_splits, other=float("-inf"))
    o = tl.load(mid_o_ptr + (row + s)[:, None] * LORA + col[None, :],
                mask=(s < n_splits)[:, None], other=0.0)
    m = tl.max(lse, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m)
    total = tl.sum(w, 0)
    total = tl.where(total == 0.0, 1.0, total)
    acc = tl.sum(w[:, None] * o, 0)
    tl.store(o_ptr + tok * o_tok_stride + head * o_head_stride + col,
             (acc / total * kv_scale).to(o_ptr.dtype.element_ty), mask=col < L)


class _AtOnce:
    """Stands in for atom's merge kernel object: the same arguments, launched one program per
    (token, head), SPLIT_PAD the splits' power of two."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            n_splits = args[6]
            kw = {k: v for k, v in kw.items() if k != "CHUNK"}
            kw |= dict(HEADS=1, SPLIT_PAD=triton.next_power_of_2(n_splits))
            _merge_at_once[(grid[0], args[5])](*args, **kw)
        return launch


def kernel_us(fn, calls: int = 20) -> dict[str, float]:
    """Mean device µs a call of each kernel fn launches, over eager calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" and "mla" in ev.key:
            out[ev.key] = round(ev.device_time_total / calls, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    atom_merge = mla_decode._mla_merge_kernel
    res: dict[str, object] = {}
    for kvd, tag in ((torch.bfloat16, "bf16"), (torch.float8_e4m3fn, "fp8")):
        for b, c in ((64, 1024), (128, 1024), (256, 1024), (64, 4096), (64, 8192)):
            q, cache, meta, byts = _mla_decode_case(b, c, 16, kvd)
            outs = {}
            for name, merge in (("atom", atom_merge), ("at_once", _AtOnce())):
                mla_decode._mla_merge_kernel = merge
                try:
                    out = torch.empty(q.shape[0], 16, R1_LATENT[0], device="cuda",
                                      dtype=torch.bfloat16)
                    call = lambda: mla_decode.mla_decode_attention(  # noqa: E731
                        q, cache, meta, R1_LATENT[0], 192 ** -0.5, 1.0, out=out)
                    ms = _graph_ms(call)
                    res[f"{tag}_b{b}_ctx{c}_{name}"] = {
                        "us": round(ms * 1e3, 1), "TBps": round(byts / (ms * 1e-3) / 1e12, 3),
                        "kernels_us": kernel_us(call)}
                    outs[name] = out
                finally:
                    mla_decode._mla_merge_kernel = atom_merge
            res[f"{tag}_b{b}_ctx{c}_maxdiff"] = float(
                (outs["atom"].float() - outs["at_once"].float()).abs().max())
            res[f"{tag}_b{b}_ctx{c}_splits"] = mla_decode.num_splits(b, 1, q.device, 2)
            print(tag, b, c, {k.split(f"ctx{c}_")[-1]: v for k, v in res.items()
                              if k.startswith(f"{tag}_b{b}_ctx{c}_")}, flush=True)
            del q, cache
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
