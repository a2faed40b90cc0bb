"""The byte floor of issue 22's benchmark 1 at acceptance length 1.0: how fast an EAGLE-3 step
that keeps no draft can be against plain decoding, at batch 1, for k = 1..7.

Why: at length 1.0 a step emits one token, as a plain step does, but reads the target's
weights for a verify of 1 + k queries and then the head's for its catch-up and k - 1 draft
depths. Whatever the host does, the step cannot take less than its bytes at the copy bandwidth,
so plain step bytes / speculative step bytes bounds the ratio the benchmark can reach (goal
0.85x at k = 7). The bytes come from the models atom builds (Llama-3.1-8B from
conf/model/llama3_8b.yaml, the head at benchmarks/eagle3_bench.py's published shape), built on
the meta device: every parameter once per forward but the embeddings (one row a token; the head
reads the target's), plus the KV each forward's attention reads at the benchmark's context.
A second bound uses the bf16 single-row GEMV as measured (benchmarks/results/H200.md, run 59's
fp8_kernels table, bf16 column): a least-squares line through its four 8B projections gives a
fixed cost per launch and a streaming rate, charged per linear layer of each forward. The last
column halves the head's linear weights (an e4m3 head), the target kept in bf16.

    python research/probes/spec_len1_floor.py [--ctx 512] [--gen 256]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from eagle3_bench import write_head  # noqa: E402

import atom  # noqa: E402
from atom.kernels.backend import get_backend  # noqa: E402
from atom.layers.model_context import ModelContext  # noqa: E402
from atom.layers.parallel_state import ParallelState  # noqa: E402
from atom.loader.hf_config import architecture_of, load_hf_config  # noqa: E402
from atom.models.eagle3 import Eagle3Draft  # noqa: E402
from atom.models.registry import model_class  # noqa: E402
from atom.spec_decode.draft_model_drafter import draft_model_config  # noqa: E402

COPY_TBS = 4.18  # H200 copy bandwidth (benchmarks/results/H200.md, issue 5)
BF16 = 2
# bf16 single-row GEMV of the 8B projections, (weight MB, us): H200.md run 59, fp8_kernels.
BF16_GEMV = ((50.3, 16.15), (33.6, 11.27), (234.9, 61.98), (117.4, 33.54))


@dataclass(frozen=True)
class Model:
    """One forward's reads: the linear layers' weights (bytes each) and the rest."""

    linears: tuple[int, ...]
    other: int  # norms, d2t: read whole every forward
    kv_per_token: int  # K and V bytes of one position over every attention layer
    embed_row: int  # one embedding row's bytes (the target's table serves the head too)

    def bytes(self, ctx: int, tokens: int) -> int:
        return sum(self.linears) + self.other + ctx * self.kv_per_token + tokens * self.embed_row


def _built(hf, cls: type) -> torch.nn.Module:
    mc = ModelContext(get_backend("torch"), ParallelState())
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            return cls(hf, mc)
    finally:
        torch.set_default_dtype(prev)


def _reads(model: torch.nn.Module, hf, skip: tuple[str, ...] = ()) -> Model:
    """Linear weights by module; `skip`: modules a forward does not run (a depth's fc)."""
    linears, other, embed_row = [], 0, 0
    for name, mod in model.named_modules():
        own = [p for p in mod.parameters(recurse=False)]
        if not own or any(name.endswith(s) for s in skip):
            continue
        size = sum(p.numel() * p.element_size() for p in own)
        if "embed_tokens" in name:
            embed_row = own[0].shape[-1] * own[0].element_size()
        elif isinstance(mod, torch.nn.Module) and own[0].dim() == 2:
            linears.append(size)
        else:
            other += size
    layers = int(hf.num_hidden_layers)
    kv = layers * 2 * int(hf.num_key_value_heads) * (int(hf.hidden_size)
                                                      // int(hf.num_attention_heads)) * BF16
    return Model(tuple(linears), other, kv, embed_row)


def _gemv_fit() -> tuple[float, float]:
    """(us per launch, TB/s) of the bf16 GEMV, least squares over BF16_GEMV."""
    xs, ys = [mb * 1e6 for mb, _ in BF16_GEMV], [us for _, us in BF16_GEMV]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, 1e-6 / slope


def _gemv_us(m: Model, ctx: int, fit: tuple[float, float]) -> float:
    """A forward by the measured GEMV line for its linears, the rest at copy bandwidth."""
    a, tbs = fit
    rest = m.other + ctx * m.kv_per_token
    return sum(a + b / (tbs * 1e6) for b in m.linears) + rest / (COPY_TBS * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=512, help="prompt tokens (eagle3_bench's)")
    ap.add_argument("--gen", type=int, default=256, help="new tokens: the mean context adds half")
    args = ap.parse_args()
    ctx = args.ctx + args.gen // 2
    with tempfile.TemporaryDirectory() as tmp:
        head_dir = write_head(Path(tmp))
        cfg = atom.compose(["model=llama3_8b", "load.dummy=zero", "specdecode=eagle3",
                            f"specdecode.draft_model={head_dir}"])
        target_hf = load_hf_config(cfg, snapshot=False)
        head_hf = load_hf_config(draft_model_config(cfg), snapshot=False)
        head_hf_cfg = json.loads((head_dir / "config.json").read_text())
    target = _reads(_built(target_hf, model_class(architecture_of(target_hf))), target_hf)
    head_model = _built(head_hf, Eagle3Draft)
    catch_up = _reads(head_model, head_hf)
    depth = _reads(head_model, head_hf, skip=("fc",))
    fit = _gemv_fit()
    plain = target.bytes(ctx, 1)
    plain_us = _gemv_us(target, ctx, fit)
    print(f"context {ctx} (prompt {args.ctx} + half of {args.gen}); head "
          f"{head_hf_cfg['hidden_size']} wide, draft vocab {head_hf_cfg['draft_vocab_size']}")
    print(f"plain step: {plain / 1e9:.3f} GB = {plain / (COPY_TBS * 1e6):.0f} us at "
          f"{COPY_TBS} TB/s; by the bf16 GEMV line ({fit[0]:.2f} us + bytes / {fit[1]:.2f} "
          f"TB/s a launch, {len(target.linears)} launches) {plain_us:.0f} us")
    print(f"head forward: catch-up {catch_up.bytes(ctx, 0) / 1e9:.3f} GB (fc included), depth "
          f"{depth.bytes(ctx, 0) / 1e9:.3f} GB; lm_head {head_hf_cfg['draft_vocab_size']} x "
          f"{head_hf_cfg['hidden_size']}")
    print("k | step GB | floor at copy | by the GEMV line | fp8 head weights, at copy")
    for k in range(1, 8):
        verify = target.bytes(ctx, 1 + k)
        heads = catch_up.bytes(ctx, 1 + k) + (k - 1) * depth.bytes(ctx, 1)
        step = verify + heads
        halved = step - (sum(catch_up.linears) + (k - 1) * sum(depth.linears)) // 2
        step_us = (_gemv_us(target, ctx, fit) + _gemv_us(catch_up, ctx, fit)
                   + (k - 1) * _gemv_us(depth, ctx, fit))
        print(f"{k} | {step / 1e9:.3f} | {plain / step:.3f}x | {plain_us / step_us:.3f}x | "
              f"{plain / halved:.3f}x")


if __name__ == "__main__":
    main()
