"""Issue 22's GPU benchmark 3: MTP speculation on a reduced-depth DeepSeek-R1 at forced
acceptance, against the same model without speculation, at batch 1 and 32.

    python benchmarks/mtp_bench.py --layers 4 --out $OUT/mtp.json --extra model.max_model_len=4096

Dummy xavier weights at R1's shapes with its next-n layer (num_nextn_predict_layers: 1), so the
drafts are noise and acceptance is forced from the published rate (0.81 for k = 1; the same
per-draft rate for k = 3): what is measured is the cost of the draft layer, the verify steps and
the rejection path, and the tokens per forward the schedule gives. Output tokens per second of
the decode phase (first token excluded) and the engine's MTP counters over the timed run.
On the GPU's Triton kernels every variant runs in CUDA graphs (the verify step at 1 + k tokens a
sequence, the layer's catch-up and its draft depths: runner/cuda_graphs.py), captured at the
powers of two up to the largest batch; `mtp_k*_eager` runs the same speculation without graphs
(what they buy), and each variant records the graphs it captured and how often each replayed.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from probe_kit import probe_meta


def _engine(layers: int, batches: list[int], extra: list[str]):
    from atom.config.compose import compose
    from atom.llm_engine import LLMEngine

    sizes = sorted({2 ** i for i in range(max(batches).bit_length())} | set(batches))
    cfg = compose(["model=deepseek_r1", "load=dummy", "load.dummy=xavier",
                   f"model.hf_config.num_hidden_layers={layers}",
                   f"runtime.cudagraph_capture_sizes=[{','.join(map(str, sizes))}]", *extra])
    cfg.load.progress_bar = False
    return LLMEngine.from_config(cfg)


def _run(eng, batch: int, ctx: int, gen: int, temperature: float) -> dict[str, Any]:
    from atom import SamplingParams

    rng = random.Random(batch)
    vocab = eng.core.executor.runner.vocab_size
    prompts = [[rng.randrange(100, vocab - 100) for _ in range(ctx)] for _ in range(batch)]
    params = SamplingParams(temperature=temperature, max_tokens=gen, ignore_eos=True)
    eng.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    before = _counters(eng)
    t0 = time.perf_counter()
    outs = eng.generate(prompts, params)
    wall = time.perf_counter() - t0
    decode = max(o["latency"] - o["ttft"] for o in outs)
    after = _counters(eng)
    d = {k: after[k] - before[k] for k in after}
    return {"batch": batch, "ctx": ctx, "gen": gen, "temperature": temperature,
            "wall_s": round(wall, 3),
            "decode_tok_s": round(batch * (gen - 1) / decode, 1),
            "draft_tokens": d["draft"], "accepted_tokens": d["accepted"],
            "acceptance_rate": round(d["accepted"] / d["draft"], 4) if d["draft"] else None,
            "tokens_per_forward": round(1 + d["accepted"] / d["forwards"], 3)
            if d["forwards"] else None}


def _graphs(eng) -> dict[str, Any]:
    """The query lengths captured for the target and for the drafter's forwards."""
    runner = eng.core.executor.runner
    target = [g.q_len for g in (runner.graphs, *runner.verify_graphs) if g is not None]
    drafter = runner.drafter
    drafts = ({name: [g.q_len for g in gs] for name, gs in drafter._graphs.items()}
              if drafter is not None else {})
    return {"target": target, "drafter": drafts}


class _Replays:
    """Counts StepGraphs replays by (forward, query length) while installed."""

    def __init__(self) -> None:
        from atom.runner.cuda_graphs import StepGraphs

        self.counts: dict[str, int] = {}
        self._cls, self._orig = StepGraphs, StepGraphs.replay
        orig, counts = self._orig, self.counts

        def counted(graphs, *args):
            key = f"{graphs.name or 'target'}@q{graphs.q_len}"
            counts[key] = counts.get(key, 0) + 1
            return orig(graphs, *args)

        StepGraphs.replay = counted

    def close(self) -> dict[str, int]:
        self._cls.replay = self._orig
        return self.counts


def _counters(eng) -> dict[str, int]:
    s = eng.stats()
    return {"draft": s.spec_draft_tokens, "accepted": s.spec_accepted_tokens,
            "forwards": s.spec_verify_forwards}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4, help="decoder layers kept (R1 has 61)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--ks", default="1,3")
    ap.add_argument("--rate", type=float, default=0.81, help="forced per-draft acceptance")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--extra", nargs="*", default=[], help="Hydra overrides for every engine")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"meta": probe_meta(command=" ".join(sys.argv))}
    batches = [int(b) for b in args.batches.split(",")]
    eager = ["runtime.enforce_eager=true"]
    variants = [("plain", []), ("plain_eager", eager)]
    for k in (int(k) for k in args.ks.split(",")):
        mtp = ["specdecode=mtp", f"specdecode.num_speculative_tokens={k}",
               f"specdecode.acceptance_rate={args.rate}"]
        variants += [(f"mtp_k{k}", mtp), (f"mtp_k{k}_eager", [*mtp, *eager])]
    for name, spec in variants:
        eng = _engine(args.layers, batches, [*args.extra, *spec])
        replays = _Replays()
        runs = [_run(eng, b, args.ctx, args.gen, args.temperature) for b in batches]
        results[name] = {"runs": runs, "cuda_graphs": _graphs(eng), "replays": replays.close()}
        print(f"== {name}: {json.dumps(results[name])}", flush=True)
        eng.shutdown()
        del eng
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
