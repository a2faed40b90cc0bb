"""Host time of a drafter's propose outside its forwards, on the CPU: EAGLE-3 k drafts a step on a
tiny llama target (tests' random checkpoints), batch 1, forced acceptance length 1.0 (every
draft rejected, so every step drafts all k), greedy and sampled.

Why: on the GPU a propose is host-bound when the host work between its forwards is more than
the forwards' GPU time (research/probes/spec_step_trace.py splits an 8B step). On the CPU there
is no stream to wait for, so what this measures is the Python and launch work alone: the total
wall time of each propose minus the time inside `Drafter._forward` (the catch-up and the
depths' forwards, which run synchronously here), the median over the run's steps.

    python research/probes/propose_host_time.py [--k 7] [--tokens 200]

Established (2-core CPU host, k = 7, greedy / temperature 0.8): 0.405 / 0.70 ms a propose with
every depth's inputs built per depth (9c141de), 0.25 / 0.51 ms with them planned and staged once.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from atom import SamplingParams  # noqa: E402
from tests.engine.checkpoints import local_engine, make_checkpoint  # noqa: E402
from tests.engine.test_eagle3_spec_decode import TARGET_LAYERS, make_eagle3  # noqa: E402


def measure(engine, k: int, temperature: float, tokens: int) -> dict:
    drafter = engine.core.executor.runner.drafter
    inside = [0.0]
    forward, propose = drafter._forward, drafter.propose

    def timed_forward(*args):
        t = time.perf_counter()
        out = forward(*args)
        inside[0] += time.perf_counter() - t
        return out

    samples: list[tuple[float, float]] = []

    def timed_propose(*args):
        inside[0] = 0.0
        t = time.perf_counter()
        out = propose(*args)
        samples.append((time.perf_counter() - t, inside[0]))
        return out

    drafter._forward, drafter.propose = timed_forward, timed_propose
    try:
        engine.generate([[5, 6, 7, 8] * 8], SamplingParams(
            temperature=temperature, max_tokens=tokens, ignore_eos=True, seed=1))
    finally:
        drafter._forward, drafter.propose = forward, propose
    steady = samples[5:]  # past the prompt's step and the first allocations
    host = statistics.median(total - fwd for total, fwd in steady)
    return {"temperature": temperature, "proposes": len(steady),
            "host_ms_per_propose": round(host * 1e3, 3),
            "host_ms_per_depth": round(host * 1e3 / k, 3),
            "wall_ms_per_propose": round(statistics.median(t for t, _ in steady) * 1e3, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = make_checkpoint("llama", root, num_hidden_layers=TARGET_LAYERS)
        engine = local_engine(target, "kv_cache.block_size=16", "kv_cache.num_blocks=256",
                              "runtime.kernels=torch", "specdecode=eagle3",
                              f"specdecode.draft_model={make_eagle3(root)}",
                              f"specdecode.num_speculative_tokens={args.k}",
                              "specdecode.acceptance_length=1.0")
        try:
            for temperature in (0.0, 0.8):
                print(measure(engine, args.k, temperature, args.tokens), flush=True)
        finally:
            engine.shutdown()


if __name__ == "__main__":
    main()
