"""Issue 21's proof 4: DeepSeek-R1 on 8 x H200 (fp8 weights, tp8, one engine), decode tok/s per
GPU in the 1k/1k run's steady state, estimated from what was measured on one H200, beside
TensorRT-LLM's published 1,627 tok/s/GPU.

A decode step of B sequences at mean context C reads, on each GPU: its slice of every weight
the step touches (the routed experts that any of the B tokens picked: 256 x (1 - (1 - 8/256)^B)
of 256 per layer; q_a/kv_a replicated, the rest split 8 ways), and the whole latent cache of the
B sequences (MLA has one KV head, so tensor parallelism replicates the cache: every rank reads
it for its 16 heads). Step time = bytes at the measured fraction of copy bandwidth, or the
FLOPs at a sustained fp8 rate if longer, plus the all-reduces (tp_cost_model.py's constants,
not overlapped). Efficiencies are the measured ones (benchmarks/results/H200.md, runs 50-58) or
the issue's goals (--goals); every constant is a flag.

    python research/probes/r1_8gpu_estimate.py [--goals] [--ctx 1536]
"""
from __future__ import annotations

import argparse

from tp_cost_model import DEEPSEEK_R1, step_comm_us

GPUS = 8
COPY_TBS = 4.18  # measured copy bandwidth of one H200 (TB/s)
LAYERS, DENSE, HIDDEN, VOCAB = 61, 3, 7168, 129280
EXPERTS, TOPK, MOE_INTER, SHARED_INTER, DENSE_INTER = 256, 8, 2048, 2048, 18432
Q_LORA, KV_LORA, ROPE, NOPE, V, HEADS = 1536, 512, 64, 128, 128, 128
LATENT = KV_LORA + ROPE  # 576 values per token and layer
FP8 = 1


def weight_bytes(batch: int) -> float:
    """fp8 weight bytes one GPU reads in a decode step of `batch` tokens (scales ignored: 1/16384
    of a 128 x 128 block's bytes)."""
    replicated = LAYERS * HIDDEN * (Q_LORA + LATENT)  # q_a_proj, kv_a_proj_with_mqa
    attn = LAYERS * (Q_LORA * HEADS * (NOPE + ROPE) + KV_LORA * HEADS * (NOPE + V)
                     + HEADS * V * HIDDEN)
    dense = DENSE * 3 * HIDDEN * DENSE_INTER
    shared = (LAYERS - DENSE) * 3 * HIDDEN * SHARED_INTER
    touched = EXPERTS * (1 - (1 - TOPK / EXPERTS) ** batch)
    routed = (LAYERS - DENSE) * touched * 3 * HIDDEN * MOE_INTER
    head = VOCAB * HIDDEN
    return FP8 * (replicated + (attn + dense + shared + routed + head) / GPUS)


def max_batch(max_ctx: int, kv_bytes_per_value: float, gpu_gib: float, util: float) -> int:
    """Sequences whose latent caches at max_ctx fit beside every weight this GPU holds."""
    free = gpu_gib * 2**30 * util - weight_bytes(10**6)
    return int(free // (max_ctx * LAYERS * LATENT * kv_bytes_per_value))


def kv_bytes(batch: int, ctx: int, kv_bytes_per_value: float) -> float:
    return batch * ctx * LAYERS * LATENT * kv_bytes_per_value


def flops_per_gpu(batch: int, ctx: int) -> float:
    """Active-parameter GEMMs (2 x 37B a token) and absorbed MLA attention (q·latent and
    p·latent over the context, every head), split 8 ways."""
    active = 37e9
    attn = 2 * 2 * HEADS * LATENT * ctx * LAYERS
    return batch * (2 * active + attn) / GPUS


def step_ms(batch: int, ctx: int, a: argparse.Namespace) -> dict[str, float]:
    w = weight_bytes(batch) / (COPY_TBS * 1e12 * a.weight_eff) * 1e3
    kv = kv_bytes(batch, ctx, a.kv_bytes) / (COPY_TBS * 1e12 * a.mla_eff) * 1e3
    compute = flops_per_gpu(batch, ctx) / (a.fp8_tflops * 1e12) * 1e3
    _, _, comm_us = step_comm_us(DEEPSEEK_R1, batch, batch, GPUS, a.alpha_us, a.busbw_gbs)
    total = max(w + kv, compute) + comm_us / 1e3 + a.overhead_ms
    return {"weights_ms": w, "kv_ms": kv, "compute_ms": compute, "comm_ms": comm_us / 1e3,
            "step_ms": total, "tok_s_per_gpu": batch / total * 1e3 / GPUS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=1536, help="mean context of a 1k/1k decode step")
    ap.add_argument("--batches", default="32,64,128,256,512,1024")
    ap.add_argument("--kv-bytes", type=float, default=1.0, help="fp8 latent cache")
    ap.add_argument("--weight-eff", type=float, default=0.86,
                    help="fused MoE at T <= 64 reached 86%% of copy (run 50)")
    ap.add_argument("--mla-eff", type=float, default=0.25,
                    help="MLA decode, fp8 latents at 16 heads a rank: 15-25%% (run 50)")
    ap.add_argument("--fp8-tflops", type=float, default=1000.0,
                    help="sustained dense fp8 (half the 1,979 spec at the 700 W cap)")
    ap.add_argument("--alpha-us", type=float, default=20.0)
    ap.add_argument("--busbw-gbs", type=float, default=360.0)
    ap.add_argument("--overhead-ms", type=float, default=0.5, help="launch gaps in graphs")
    ap.add_argument("--max-ctx", type=int, default=2048, help="1k in + 1k out")
    ap.add_argument("--gpu-gib", type=float, default=139.8)
    ap.add_argument("--util", type=float, default=0.9, help="runtime.gpu_memory_utilization")
    ap.add_argument("--goals", action="store_true",
                    help="MLA at the issue's 80%% instead of the measured")
    a = ap.parse_args()
    if a.goals:
        a.mla_eff = 0.80
    print(f"R1 fp8 on {GPUS} x H200, tp{GPUS}, mean context {a.ctx}, MLA at {a.mla_eff:.0%} and "
          f"weights at {a.weight_eff:.0%} of {COPY_TBS} TB/s, fp8 GEMMs {a.fp8_tflops:g} TFLOP/s")
    print("| batch | weights ms | KV ms | compute ms | comm ms | step ms | tok/s per GPU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for b in (int(x) for x in a.batches.split(",")):
        r = step_ms(b, a.ctx, a)
        print(f"| {b} | {r['weights_ms']:.1f} | {r['kv_ms']:.1f} | {r['compute_ms']:.1f} | "
              f"{r['comm_ms']:.1f} | {r['step_ms']:.1f} | {r['tok_s_per_gpu']:,.0f} |")
    print(f"KV room: at most {max_batch(a.max_ctx, a.kv_bytes, a.gpu_gib, a.util)} sequences of "
          f"{a.max_ctx} tokens beside the weights.")
    print("TensorRT-LLM publishes 1,627 tok/s/GPU (8 x H200, fp8, 1k/1k).")


if __name__ == "__main__":
    main()
