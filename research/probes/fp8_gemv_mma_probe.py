"""A one-row fp8 GEMV on the e4m3 tensor cores (W8A8, the weight rows as the MMA's M, x padded
to 16 as its N) against atom's fp8_gemv and the bf16 GEMV, on Llama-3.1-8B's projections.

Why: atom's one-row fp8 GEMV converts every weight element twice in registers (e4m3 -> f16 ->
f32, F2FP + HADD2.F32: 1.5 conversion instructions an element, research/probes/gemv_sass.py)
and streams at 52–74% of copy where the bf16 GEMV, with no conversion, reaches 71–91%;
prefetching earlier made it slower (H200.md runs 107–109). Fed to wgmma from shared memory the
bytes are never converted, so this asks whether the stream then reaches the bf16 GEMV's share
of copy. Keys: `plain_read`, the weight bytes read by benchmarks/stream_read.py's kernel in the
same harness (each projection against itself; a layer's four in turn read faster, run 113);
`m0_*` takes x already in e4m3 (the pure stream), `m1_*` quantises each x tile in the loop
with a given scale, `m2_*` also finds the scale in the program first.
Split-K slices add their fp32 partials atomically (timing only: the probe checks its result
once against the dequantized product at one slice).

    python research/probes/fp8_gemv_mma_probe.py --out mma.json
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

LLAMA8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
COPY_BW = 4.18e12
M_PAD = 16


@triton.jit
def _mma_gemv_kernel(x_ptr, xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, m_rows, n_rows, k_dim,
                     k_slice, MODE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     M_PAD: tl.constexpr, ATOMIC: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ms = tl.arange(0, M_PAD)
    m_mask = ms < m_rows
    k_lo = pid_k * k_slice
    if MODE == 2:  # amax: the per-row scale from x itself
        amax = tl.zeros([M_PAD], tl.float32)
        for k0 in range(0, k_dim, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            xv = tl.load(x_ptr + ms[:, None] * k_dim + cols[None, :], mask=m_mask[:, None],
                         other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(xv), 1))
        x_scale = tl.maximum(amax, 1e-12) / 448.0
    else:
        x_scale = tl.load(xs_ptr + ms, mask=m_mask, other=1.0)
    inv = 1.0 / x_scale
    acc = tl.zeros([BLOCK_N, M_PAD], tl.float32)
    for k0 in range(k_lo, k_lo + k_slice, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rows.to(tl.int64)[:, None] * k_dim + cols[None, :])
        if MODE == 0:
            xq = tl.load(xq_ptr + ms[:, None] * k_dim + cols[None, :], mask=m_mask[:, None],
                         other=0.0)
        else:
            xv = tl.load(x_ptr + ms[:, None] * k_dim + cols[None, :], mask=m_mask[:, None],
                         other=0.0).to(tl.float32)
            xq = (xv * inv[:, None]).to(tl.float8e4nv)
        acc = tl.dot(w, tl.trans(xq), acc)
    y = acc * tl.load(ws_ptr + rows)[:, None] * x_scale[None, :]
    ptrs = y_ptr + ms[None, :] * n_rows + rows[:, None]
    if ATOMIC:
        tl.atomic_add(ptrs, y, mask=m_mask[None, :], sem="relaxed")
    else:
        tl.store(ptrs, y, mask=m_mask[None, :])


def mma_gemv(x, xq, xs, w, ws, y, mode: int, bn: int, bk: int, split: int, warps: int,
             stages: int) -> None:
    n, k = w.shape
    k_slice = k // split
    _mma_gemv_kernel[(n // bn, split)](x, xq, xs, w, ws, y, x.shape[0], n, k, k_slice,
                                       MODE=mode, BLOCK_N=bn, BLOCK_K=bk, M_PAD=M_PAD,
                                       ATOMIC=split > 1, num_warps=warps, num_stages=stages)


def main() -> None:
    import gpu_bench
    from stream_read import reader
    from atom.kernels.triton.fp8_gemv import fp8_gemv
    from atom.kernels.triton.gemv import gemv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out: dict = {"meta": gpu_bench.probe_meta()}
    ms_of = gpu_bench._per_weight_ms
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (n, k) in LLAMA8B.items():
        sets = max(2, int(240e6 // (n * k)))
        ws = [(torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn),
               torch.rand(n, device="cuda") / 448 + 1e-4) for _ in range(sets)]
        bf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(max(2, sets // 2))]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        xs = (x.float().abs().amax(1) / 448).contiguous()
        xq = (x.float() / xs[:, None]).to(torch.float8_e4m3fn)
        y = torch.zeros(1, n, device="cuda", dtype=torch.float32)
        ref = (x.float() @ (ws[0][0].float() * ws[0][1][:, None]).t())
        row: dict = {}

        def rec(key, fn, nbytes, sets_=ws):
            try:
                t = ms_of(fn, sets_)
                row[key] = {"us": round(t * 1e3, 2), "of_copy": round(nbytes / (t * 1e-3) / COPY_BW, 3)}
            except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result
                row[key] = f"{type(e).__name__}: {str(e)[:160]}"

        rec("fp8_gemv", lambda w: fp8_gemv(x, *w), n * k)
        # The same bytes read by a plain streaming kernel, launched the same way: what a
        # launch of this size can reach at all.
        readers = {id(w[0]): reader(w[0]) for w in ws}
        rec("plain_read", lambda w: readers[id(w[0])](), n * k)
        rec("bf16_gemv", lambda w: gemv(x, w), 2 * n * k, bf)
        for bn in (64, 128):
            tiles = n // bn
            for split in sorted({1, 2, 4, max(1, min(8, (2 * sms) // tiles))}):
                if (k // split) % 256:
                    continue
                for bk, warps, stages in ((128, 4, 4), (256, 4, 3), (256, 4, 4)):
                    for mode in (0, 1, 2):
                        if mode and (bk, warps, stages) != (256, 4, 4):
                            continue
                        key = f"m{mode}_n{bn}_s{split}_k{bk}_w{warps}_st{stages}"
                        rec(key, lambda w: mma_gemv(x, xq, xs, w[0], w[1], y, mode, bn, bk,
                                                    split, warps, stages), n * k)
        y.zero_()
        mma_gemv(x, xq, xs, ws[0][0], ws[0][1], y, 2, 64, 256, 1, 4, 4)
        row["rel_err_amax"] = float(((y - ref).norm() / ref.norm()).item())
        best = min((v["us"], kk) for kk, v in row.items() if isinstance(v, dict) and kk.startswith("m"))
        print(name, "fp8_gemv", row["fp8_gemv"], "plain_read", row["plain_read"],
              "bf16", row["bf16_gemv"], "best", best,
              "err", round(row["rel_err_amax"], 4), flush=True)
        out[name] = row
        del ws, bf
        torch.cuda.empty_cache()
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
