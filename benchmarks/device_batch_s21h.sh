#!/usr/bin/env bash
# The twenty-first session's ninth GPU batch: one 8B layer's four fp8 projections launched in
# turn (run 112's harness), as atom's fp8_gemv, as the W8A8 wgmma GEMV of
# research/probes/fp8_gemv_mma_probe.py (x in e4m3 ahead, or quantised in the loop) and as plain
# reads of the same bytes: how far each is from what launches of these sizes in a chain allow.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
CHAIN='import sys, json, torch; sys.path.insert(0, "benchmarks"); sys.path.insert(0, "research/probes")
import gpu_bench as g
from stream_read import reader
from fp8_gemv_mma_probe import mma_gemv
from atom.kernels.triton.fp8_gemv import fp8_gemv
shapes = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
best = {"qkv": (64, 128, 4, 4, 4), "o": (64, 128, 4, 4, 4), "gate_up": (64, 256, 1, 4, 4), "down": (64, 256, 4, 4, 3)}
loopq = {"qkv": 2, "o": 4, "gate_up": 1, "down": 4}
sets = [{k: (torch.randn(n, kk, device="cuda").to(torch.float8_e4m3fn), torch.rand(n, device="cuda") / 448 + 1e-4) for k, (n, kk) in shapes.items()} for _ in range(3)]
xs = {k: torch.randn(1, kk, device="cuda", dtype=torch.bfloat16) for k, (n, kk) in shapes.items()}
sc = {k: (x.float().abs().amax(1) / 448).contiguous() for k, x in xs.items()}
xq = {k: (xs[k].float() / sc[k][:, None]).to(torch.float8_e4m3fn) for k in xs}
ys = {k: torch.zeros(1, n, device="cuda") for k, (n, kk) in shapes.items()}
rd = {id(s[k][0]): reader(s[k][0]) for s in sets for k in s}
def pre(s):
    for k in shapes:
        bn, bk, sp, w, st = best[k]; mma_gemv(xs[k], xq[k], sc[k], *s[k], ys[k], 0, bn, bk, sp, w, st)
def loop(s):
    for k in shapes:
        mma_gemv(xs[k], xq[k], sc[k], *s[k], ys[k], 1, 64, 256, loopq[k], 4, 4)
arms = {"plain_read": lambda s: [rd[id(s[k][0])]() for k in shapes],
        "fp8_gemv": lambda s: [fp8_gemv(xs[k], *s[k]) for k in shapes],
        "wgmma_x_e4m3": pre, "wgmma_quant_in_loop": loop}
r = {a: round(g._per_weight_ms(f, sets) * 1e3, 2) for a, f in arms.items()}
r |= {a: round(g._per_weight_ms(f, sets) * 1e3, 2) for a, f in list(arms.items())[:2] for a in [a + "_again"]}
print(json.dumps(r)); json.dump(r, open(sys.argv[1], "w"))'
step chain 150 python3 -c "$CHAIN" $OUT/chain.json
