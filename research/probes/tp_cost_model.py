"""Tensor parallelism's communication per engine step on NVLink: the table in
atom/executor/README.md, computed from the collectives atom's layers issue.

A forward all-reduces the hidden state once after the embedding, once after each attention
block's output projection and once per MLP, dense or MoE (a DeepSeek MoE block adds the routed
and the shared experts' partial sums before its one reduce: atom/models/deepseek_v3.py). The LM head
gathers each rank's vocabulary slice of the sampled rows' logits. A collective costs
alpha + bus_bytes / bus_bandwidth, ring algorithm bus bytes: 2(n-1)/n x S for an all-reduce of S
bytes, (n-1)/n x S for an all-gather of S bytes in all. alpha and the bus bandwidth are
estimates (atom/executor/README.md says where they come from), to be replaced by the 2- and
8-GPU runs' measurements.

    python research/probes/tp_cost_model.py [--alpha-tp2-us 10 --alpha-tp8-us 20 --busbw-gbs 360]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

BF16 = 2


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    vocab: int

    def all_reduces(self) -> int:
        return 1 + 2 * self.layers


LLAMA_8B = Shape("Llama-3.1-8B", 32, 4096, 128256)
DEEPSEEK_R1 = Shape("DeepSeek-R1", 61, 7168, 129280)


def step_comm_us(shape: Shape, tokens: int, sampled: int, n: int, alpha_us: float,
                 busbw_gbs: float) -> tuple[int, float, float]:
    """(all-reduce count, bytes one all-reduce moves, microseconds of communication)."""
    s = tokens * shape.hidden * BF16
    ar_us = alpha_us + 2 * (n - 1) / n * s / (busbw_gbs * 1e3)
    gather = sampled * shape.vocab * BF16
    ag_us = alpha_us + (n - 1) / n * gather / (busbw_gbs * 1e3)
    return shape.all_reduces(), s, shape.all_reduces() * ar_us + ag_us


def table(alphas: dict[int, float], busbw: float, chunk: int) -> str:
    rows = ["| model | step | tp | all-reduces | bytes each | comm per step |",
            "| --- | --- | --- | --- | --- | --- |"]
    for shape in (LLAMA_8B, DEEPSEEK_R1):
        for label, tokens, sampled in (("decode bs1", 1, 1), ("decode bs64", 64, 64),
                                       ("decode bs256", 256, 256),
                                       (f"prefill chunk {chunk}", chunk, 1)):
            for n, alpha in alphas.items():
                count, s, us = step_comm_us(shape, tokens, sampled, n, alpha, busbw)
                rows.append(f"| {shape.name} | {label} | {n} | {count} | {_bytes(s)} | "
                            f"{us / 1e3:.2f} ms |")
    return "\n".join(rows)


def _bytes(b: float) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-tp2-us", type=float, default=10.0)
    ap.add_argument("--alpha-tp8-us", type=float, default=20.0)
    ap.add_argument("--busbw-gbs", type=float, default=360.0)
    ap.add_argument("--chunk", type=int, default=8192)
    a = ap.parse_args()
    print(table({2: a.alpha_tp2_us, 8: a.alpha_tp8_us}, a.busbw_gbs, a.chunk))


if __name__ == "__main__":
    main()
