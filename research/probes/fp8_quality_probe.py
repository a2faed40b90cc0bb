"""Where SmolLM2's quant=fp8 loss comes from, on the CPU (issue 19's quality goal).

One float32 engine (runtime=cpu, the torch kernels) on the embedded Q4_1 GGUF, dequantized
exactly; each variant swaps every linear's float weight for a callable the torch backend runs
(`backend.linear` calls a non-tensor weight): the weight rounded to e4m3 per output channel
(under a chosen scale rule) and/or its input rounded to e4m3 per token, both with the product's
quantizers (atom/kernels/fp8_weight.py, fp8_reference.py). "both, amax" is exactly what
quant=fp8 computes on the torch backend, and the probe checks that against a quant=fp8 engine.

Measures per variant: perplexity of benchmarks/gpu_bench.py's QUALITY_TEXT (~200 tokens, the
issue's measurement) and of a longer fixed text (the bench's LONG_TEXT: GPL-3 from Debian's
common-licenses, its first 2048 tokens), as a ratio to the float run's, and greedy agreement on
the bench's 8 prompts x 32 tokens.

    python3 research/probes/fp8_quality_probe.py --study all --out /tmp/fp8_quality.json

Studies: `main` (weights only / activations only / both, and bf16's ratio as a noise floor),
`proj` (one projection type at a time), `layer` (one layer at a time), `scale` (the weight's
scale rule), `vllm` (its per-tensor scheme), `last_layer`, `jitter` (the rounding pattern's
share), `bf16_weights` (the GPU's load order; last: it rounds the probe's weights), `all`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from gpu_bench import QUALITY_PROMPTS, QUALITY_TEXT, _token_nll, long_text_ids, ppl_ratio  # noqa: E402

import atom  # noqa: E402
from atom import SamplingParams  # noqa: E402
from atom.kernels.fp8_reference import quant_per_token  # noqa: E402
from atom.kernels.fp8_weight import E4M3, E4M3_MAX, MIN_SCALE, e4m3_scale  # noqa: E402
from atom.layers.linear import LinearBase  # noqa: E402

PROJ = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def amax_scale(w: torch.Tensor) -> torch.Tensor:
    """The product's rule (fp8_weight.quantize): each row's amax / 448."""
    return e4m3_scale(w.abs().amax(dim=1), MIN_SCALE)


def dequant(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    s = scale.unsqueeze(1)
    return (w / s).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).float() * s


def mse_scale(w: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Per channel, the multiple of amax / 448 in `grid` with the least squared error."""
    base = amax_scale(w)
    errs = torch.stack([(dequant(w, base * a) - w).pow(2).sum(1) for a in grid])
    return base * grid[errs.argmin(0)]


SCALE_RULES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "amax": amax_scale,
    "mse_0.5-1": lambda w: mse_scale(w, torch.linspace(0.5, 1.0, 51)),
    "mse_0.8-1.25": lambda w: mse_scale(w, torch.linspace(0.8, 1.25, 46)),
    "pow2": lambda w: torch.exp2(torch.ceil(torch.log2(amax_scale(w)))),
    # vLLM's online fp8 (ops.scaled_fp8_quant with no scale): one amax / 448 for the matrix
    "per_tensor": lambda w: amax_scale(w.reshape(1, -1)).expand(w.shape[0]),
}


@dataclass
class FakeFp8:
    """A linear as the fp8 GEMM would compute it, for the variant's choice of what is rounded."""

    dense: torch.Tensor  # [N, K] float32, rounded or not
    act: bool
    per_tensor_act: bool = False  # one dynamic scale for all rows (vLLM's default), not per token

    def __call__(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).float()
        if self.act:
            codes, scale = quant_per_token(x2.reshape(1, -1) if self.per_tensor_act else x2)
            x2 = (codes.float() * scale).view_as(x2)
        out = x2 @ self.dense.t()
        if bias is not None:
            out = out + bias.float()
        return out.to(x.dtype).view(*lead, self.dense.shape[0])


def linears(model: torch.nn.Module) -> dict[str, LinearBase]:
    return {n: m for n, m in model.named_modules() if isinstance(m, LinearBase)}


class Probe:
    def __init__(self, long_tokens: int) -> None:
        self.eng = self._engine("none")
        self.model = self.eng.core.executor.runner.model
        self.float_w = {n: m.weight.data.clone() for n, m in linears(self.model).items()}
        tok = self.eng.tokenizer
        self.texts = {"quality": tok.encode(QUALITY_TEXT), "long": long_text_ids(tok, long_tokens)}
        self.base: dict[str, Any] = {}
        self.base = self.measure()

    @staticmethod
    def _engine(quant: str, dtype: str = "float32"):
        return atom.build_engine(atom.compose([
            "model=smollm2_135m", "runtime=cpu", "load.progress_bar=false", f"quant={quant}",
            f"model.dtype={dtype}", "scheduler.max_num_batched_tokens=4096"]))

    def set_variant(self, weights: Optional[str], act: bool,
                    only: Callable[[str], bool] = lambda n: True,
                    per_tensor_act: bool = False) -> None:
        """Every linear whose name `only` takes: its weight rounded under `weights` (a
        SCALE_RULES key; None: float) and, with `act`, its input rounded per token (or, with
        `per_tensor_act`, under one scale for all its rows)."""
        for n, m in linears(self.model).items():
            w = self.float_w[n]
            del m.weight
            if not only(n) or (weights is None and not act):
                m.weight = torch.nn.Parameter(w, requires_grad=False)
                continue
            dense = w if weights is None else dequant(w, SCALE_RULES[weights](w))
            m.weight = FakeFp8(dense, act, per_tensor_act)

    def measure(self, eng=None, greedy: bool = True) -> dict[str, Any]:
        eng = eng or self.eng
        res: dict[str, Any] = {}
        for name, ids in self.texts.items():
            nll = _token_nll(eng, ids)
            res[f"ppl_{name}"] = round(math.exp(float(nll.mean())), 4)
            if self.base:
                ratio, se = ppl_ratio(nll, self.base[f"nll_{name}"])
                res[f"ratio_{name}"], res[f"se_{name}"] = round(ratio, 4), round(se, 4)
            else:
                res[f"nll_{name}"] = nll
        if not greedy:
            return res
        outs = eng.generate(QUALITY_PROMPTS, SamplingParams(temperature=0, max_tokens=32,
                                                     ignore_eos=True))
        toks = [o["token_ids"] for o in outs]
        if not self.base:
            res["tokens"] = toks
        else:
            same = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x))
                    for x, y in zip(self.base["tokens"], toks)]
            res.update(greedy_common_prefix=same, greedy_equal=sum(n == 32 for n in same))
        return res


def weight_error(w: torch.Tensor, rule: str) -> float:
    """Relative Frobenius error of the rounded weight."""
    return float((dequant(w, SCALE_RULES[rule](w)) - w).norm() / w.norm())


def study_main(p: Probe) -> dict[str, Any]:
    out = {}
    for label, weights, act in (("weights_only", "amax", False), ("acts_only", None, True),
                                ("both", "amax", True)):
        p.set_variant(weights, act)
        out[label] = p.measure()
    p.set_variant(None, False)
    eng = Probe._engine("fp8")
    out["engine_quant_fp8"] = p.measure(eng)
    eng.shutdown()
    bf16 = Probe._engine("none", "bfloat16")
    out["engine_bf16"] = p.measure(bf16)
    eng = Probe._engine("fp8", "bfloat16")
    out["engine_bf16_quant_fp8"] = p.measure(eng)
    eng.shutdown()
    # against bf16's own run, as the GPU bench measures (run 72's 1.029)
    ref, p.base = p.base, {}
    p.base = p.measure(bf16)
    bf16.shutdown()
    eng = Probe._engine("fp8", "bfloat16")
    out["engine_bf16_quant_fp8_vs_bf16"] = p.measure(eng)
    eng.shutdown()
    p.base = ref
    return out


def study_proj(p: Probe) -> dict[str, Any]:
    out = {}
    for proj in PROJ:
        for label, weights, act in (("w", "amax", False), ("a", None, True), ("wa", "amax", True)):
            p.set_variant(weights, act, lambda n, proj=proj: n.endswith(proj))
            out[f"{proj}_{label}"] = p.measure()
    return out


def study_layer(p: Probe) -> dict[str, Any]:
    out = {}
    layers = len(p.model.model.layers)
    for i in range(layers):
        p.set_variant("amax", True, lambda n, i=i: f".layers.{i}." in n)
        r = p.measure(greedy=False)
        out[f"layer_{i}"] = {k: r[k] for k in ("ratio_quality", "ratio_long")}
        print(i, out[f"layer_{i}"], flush=True)
    return out


def study_last_layer(p: Probe) -> dict[str, Any]:
    """The last layer's projections one at a time, weights and inputs apart (the layer study's
    largest share)."""
    out = {}
    last = len(p.model.model.layers) - 1
    for proj in PROJ:
        for label, weights, act in (("w", "amax", False), ("a", None, True)):
            p.set_variant(weights, act, lambda n, proj=proj: n.endswith(f".layers.{last}.{proj}")
                          or n.endswith(f".layers.{last}.self_attn.{proj}")
                          or n.endswith(f".layers.{last}.mlp.{proj}"))
            out[f"{proj}_{label}"] = p.measure(greedy=False)
    return out


def study_scale(p: Probe) -> dict[str, Any]:
    out = {}
    errs = {r: [] for r in SCALE_RULES}
    for w in p.float_w.values():
        for r in SCALE_RULES:
            errs[r].append(weight_error(w, r))
    for r in SCALE_RULES:
        p.set_variant(r, True)
        out[r] = p.measure()
        out[r]["weight_rel_err_mean"] = round(sum(errs[r]) / len(errs[r]), 6)
    return out


def study_vllm(p: Probe) -> dict[str, Any]:
    """vLLM's online fp8 on the same weights: per-tensor weight scales, activations per tensor
    (its default dynamic scheme) or per token."""
    out = {}
    for label, per_tensor_act in (("per_tensor_w_per_tensor_a", True),
                                  ("per_tensor_w_per_token_a", False)):
        p.set_variant("per_tensor", True, per_tensor_act=per_tensor_act)
        out[label] = p.measure()
    return out


def study_jitter(p: Probe) -> dict[str, Any]:
    """How much the ratio owes to which values happen to round up: each channel's amax / 448
    raised by a random 0-0.4% (no clipping, the same error statistics), five seeds."""
    out = {}
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        SCALE_RULES["jitter"] = lambda w, g=g: amax_scale(w) * (
            1 + torch.rand(w.shape[0], generator=g) * 2 ** -8)
        p.set_variant("jitter", True)
        out[f"seed_{seed}"] = p.measure(greedy=False)
    del SCALE_RULES["jitter"]
    return out


def study_bf16_weights(p: Probe) -> dict[str, Any]:
    """The GPU's order (the GGUF dequantized to bf16, then e4m3) in the float32 engine: does the
    double rounding cost anything?"""
    for n, w in p.float_w.items():
        p.float_w[n] = w.bfloat16().float()
    p.set_variant("amax", True)
    return {"amax_from_bf16": p.measure()}


STUDIES = {"main": study_main, "vllm": study_vllm, "proj": study_proj, "layer": study_layer,
           "last_layer": study_last_layer, "scale": study_scale, "jitter": study_jitter,
           "bf16_weights": study_bf16_weights}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="main", help=f"comma-separated: {', '.join(STUDIES)}, or all")
    ap.add_argument("--long-tokens", type=int, default=2048)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.manual_seed(0)
    t0 = time.time()
    p = Probe(args.long_tokens)
    res: dict[str, Any] = {"float32": {k: v for k, v in p.base.items() if k.startswith("ppl")},
                           "text_tokens": {k: len(v) for k, v in p.texts.items()}}
    for name in (STUDIES if args.study == "all" else args.study.split(",")):
        res[name] = STUDIES[name](p)
        print(json.dumps({name: res[name]}), flush=True)
    p.set_variant(None, False)
    res["seconds"] = round(time.time() - t0, 1)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
