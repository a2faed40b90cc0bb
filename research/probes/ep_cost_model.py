"""Expert parallelism's exchange per MoE layer and decode step on NVLink: the table in
atom/executor/README.md ("Expert parallelism: all-reduce or all-to-all").

Two layouts for the same total batch of T tokens on n = ep ranks, hidden H, top-k experts:

- atom's (attention tensor-parallel, every rank sees all T tokens): the routed experts' partial
  sums are all-reduced once, S = T·H·2 bytes (bf16); a ring moves 2(n-1)/n·S per rank.
- dispatch/combine (attention data-parallel, each rank its own T/n tokens): each token goes to
  the ranks of its k experts and comes back, (T/n)·k·H·2 bytes per rank per direction, of which
  (n-1)/n leave the GPU; two collectives, each paying the latency.
- gather/scatter (attention data-parallel as atom builds it, parallel.enable_dp_attention):
  every rank's T/n rows all-gathered before the MoE block and its partial sums reduce-scattered
  after, (n-1)/n·T·H·2 bytes per rank each: the all-reduce's bytes, in two collectives.

Under tensor-parallel attention an all-to-all would need the tokens split first (a
reduce-scatter in place of the attention's all-reduce, an all-gather after the combine: the
same bytes as that all-reduce), so the comparison is only worth making with the attention
all-reduce counted too: column "layer" adds it to atom's layout, which data-parallel attention
does not pay. A collective costs alpha + bytes / bandwidth; both are estimates (the README says
where they come from), to be replaced by measurements.

    python research/probes/ep_cost_model.py [--alpha-ep2-us 10 --alpha-ep8-us 20 --gbs 360]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

BF16 = 2


@dataclass(frozen=True)
class MoeShape:
    name: str
    hidden: int
    top_k: int
    experts: int
    ep: int


DEEPSEEK_R1 = MoeShape("DeepSeek-R1", 7168, 8, 256, 8)
QWEN3_30B_A3B = MoeShape("Qwen3-30B-A3B", 2048, 8, 128, 2)


def all_reduce(m: MoeShape, tokens: int, alpha_us: float, gbs: float) -> tuple[float, float]:
    """(bytes one rank sends, microseconds) of the all-reduce of the MoE output."""
    n = m.ep
    sent = 2 * (n - 1) / n * tokens * m.hidden * BF16
    return sent, alpha_us + sent / (gbs * 1e3)


def dispatch_combine(m: MoeShape, tokens: int, alpha_us: float, gbs: float,
                     dispatch_bytes: float = BF16) -> tuple[float, float]:
    """(bytes one rank sends, microseconds) of dispatch + combine; `dispatch_bytes` 1 for an
    fp8 dispatch (DeepSeek's), the combine stays bf16."""
    n = m.ep
    pairs_out = tokens / n * m.top_k * (n - 1) / n
    sent = pairs_out * m.hidden * (dispatch_bytes + BF16)
    return sent, 2 * alpha_us + sent / (gbs * 1e3)


def gather_scatter(m: MoeShape, tokens: int, alpha_us: float,
                   gbs: float) -> tuple[float, float]:
    """(bytes one rank sends, microseconds) of the all-gather + reduce-scatter of balanced
    ranks' rows (T/n each; an imbalanced step pays for n times its largest rank's)."""
    n = m.ep
    sent = 2 * (n - 1) / n * tokens * m.hidden * BF16
    return sent, 2 * alpha_us + sent / (gbs * 1e3)


def table(alphas: dict[int, float], gbs: float, batches: tuple[int, ...]) -> str:
    rows = ["| model | ep | T | all-reduce: bytes/rank | µs | layer µs | dispatch+combine: "
            "bytes/rank | µs | fp8 dispatch µs | gather+scatter µs |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in (DEEPSEEK_R1, QWEN3_30B_A3B):
        a = alphas[m.ep]
        for t in batches:
            ar_b, ar_us = all_reduce(m, t, a, gbs)
            a2a_b, a2a_us = dispatch_combine(m, t, a, gbs)
            _, fp8_us = dispatch_combine(m, t, a, gbs, dispatch_bytes=1)
            _, gs_us = gather_scatter(m, t, a, gbs)
            rows.append(f"| {m.name} | {m.ep} | {t} | {_bytes(ar_b)} | {ar_us:.1f} | "
                        f"{2 * ar_us:.1f} | {_bytes(a2a_b)} | {a2a_us:.1f} | {fp8_us:.1f} | "
                        f"{gs_us:.1f} |")
    return "\n".join(rows)


def _bytes(n: float) -> str:
    for unit, size in (("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alpha-ep2-us", type=float, default=10.0)
    p.add_argument("--alpha-ep8-us", type=float, default=20.0)
    p.add_argument("--gbs", type=float, default=360.0, help="bytes a rank sends per µs, in GB/s")
    args = p.parse_args()
    print(table({2: args.alpha_ep2_us, 8: args.alpha_ep8_us}, args.gbs,
                (1, 8, 64, 256, 1024, 4096)))


if __name__ == "__main__":
    main()
