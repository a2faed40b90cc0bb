"""What the speculative-decoding GPU benchmarks share (mtp_bench.py, eagle3_bench.py): one timed
batch's decode rate and the engine's speculation counters over it, the CUDA graphs an engine
captured and how often each replayed, and running a list of engine variants one at a time."""
from __future__ import annotations

import argparse
import gc
import json
import random
import time
from typing import Any, Callable


def bench_args(gen: int, batches: str) -> argparse.ArgumentParser:
    """The options every speculative-decoding benchmark takes; each adds its own."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--gen", type=int, default=gen)
    ap.add_argument("--batches", default=batches)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--extra", nargs="*", default=[], help="Hydra overrides for every engine")
    ap.add_argument("--out", default=None)
    return ap


def run_batch(eng, batch: int, ctx: int, gen: int, temperature: float) -> dict[str, Any]:
    """Output tok/s of the decode phase (first token excluded) of `batch` random prompts of
    `ctx` tokens, after a short warm-up request."""
    from atom import SamplingParams

    rng = random.Random(batch)
    vocab = eng.core.executor.runner.vocab_size
    prompts = [[rng.randrange(100, vocab - 100) for _ in range(ctx)] for _ in range(batch)]
    params = SamplingParams(temperature=temperature, max_tokens=gen, ignore_eos=True)
    eng.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    before = counters(eng)
    t0 = time.perf_counter()
    outs = eng.generate(prompts, params)
    wall = time.perf_counter() - t0
    decode = max(o["latency"] - o["ttft"] for o in outs)
    after = counters(eng)
    d = {k: after[k] - before[k] for k in after}
    return {"batch": batch, "ctx": ctx, "gen": gen, "temperature": temperature,
            "wall_s": round(wall, 3),
            "decode_tok_s": round(batch * (gen - 1) / decode, 1),
            "draft_tokens": d["draft"], "accepted_tokens": d["accepted"],
            "acceptance_rate": round(d["accepted"] / d["draft"], 4) if d["draft"] else None,
            "tokens_per_forward": round(1 + d["accepted"] / d["forwards"], 3)
            if d["forwards"] else None}


def counters(eng) -> dict[str, int]:
    s = eng.stats()
    return {"draft": s.spec_draft_tokens, "accepted": s.spec_accepted_tokens,
            "forwards": s.spec_verify_forwards}


def graphs_of(eng) -> dict[str, Any]:
    """The query lengths captured for the target and for the drafter's forwards."""
    runner = eng.core.executor.runner
    target = [g.q_len for g in (runner.graphs, *runner.verify_graphs) if g is not None]
    drafter = runner.drafter
    drafts = ({name: [g.q_len for g in gs] for name, gs in drafter._graphs.items()}
              if drafter is not None else {})
    return {"target": target, "drafter": drafts}


class Replays:
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


def run_variants(variants: list[tuple[str, list[str]]], engine: Callable[[list[str]], Any],
                 batches: list[int], ctx: int, gen: int, temperature: float,
                 results: dict[str, Any]) -> None:
    """Each (name, overrides) variant in its own engine, freed before the next is built."""
    import torch

    for name, overrides in variants:
        eng = engine(overrides)
        replays = Replays()
        runs = [run_batch(eng, b, ctx, gen, temperature) for b in batches]
        results[name] = {"runs": runs, "cuda_graphs": graphs_of(eng), "replays": replays.close()}
        print(f"== {name}: {json.dumps(results[name])}", flush=True)
        eng.shutdown()
        del eng
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def dummy_engine(overrides: list[str], batches: list[int]):
    """An in-process engine on dummy xavier weights, its graphs captured at the powers of two
    below the largest batch and at the batches themselves."""
    from atom.config.compose import compose
    from atom.llm_engine import LLMEngine

    sizes = sorted({2 ** i for i in range(max(batches).bit_length())} | set(batches))
    cfg = compose(["load=dummy", "load.dummy=xavier",
                   f"runtime.cudagraph_capture_sizes=[{','.join(map(str, sizes))}]", *overrides])
    cfg.load.progress_bar = False
    return LLMEngine.from_config(cfg)
