"""Every token a tree's engine gives on CPU, as one JSON line: run it under two trees and compare
the lines, to show that a refactor of the engine's wiring moved no token.

Why: the oracle tests check each architecture against transformers within a tolerance; a
wiring change (how the model, its backend and its forward context are built and handed over)
should change nothing at all. This covers the single-token path (greedy, seeded sampling,
logprobs) on the torch and cpu kernel backends, and two 2-token verify steps through the
executor (a wrong draft, then a right one), for llama, qwen3, qwen3-MoE and DeepSeek-V3 tiny
checkpoints made once under CKPT_DIR and reused by both trees.

    CKPT_DIR=/tmp/ckpt PYTHONPATH=/path/old python research/probes/tokens_of_tree.py > old.json
    CKPT_DIR=/tmp/ckpt PYTHONPATH=. python research/probes/tokens_of_tree.py > new.json
    cmp old.json new.json
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from atom import SamplingParams
from atom.model_engine.messages import EngineRequest
from tests.engine.checkpoints import local_engine, make_checkpoint

ARCHS = ("llama", "qwen3", "qwen3_moe", "deepseek_v3_q_lora")
PARAMS = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
          SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=12, ignore_eos=True),
          SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=2)]


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 256, (k,), generator=g).tolist() for k in (6, 13, 9)]


def _generated(path: Path, kernels: str) -> list[list[int]]:
    engine = local_engine(path, f"runtime.kernels={kernels}", "kv_cache.block_size=4")
    try:
        return [out["token_ids"] for out in engine.generate(_prompts(), PARAMS)]
    finally:
        engine.shutdown()


def _verify_steps(path: Path, reference: list[int]) -> list[dict[str, list[int]]]:
    """A prefill, then two steps that each feed the last token and one draft: first a wrong
    draft, then the right one. The tokens each step keeps, as the executor returns them."""
    core = local_engine(path, "kv_cache.block_size=4", "scheduler.async_scheduling=false").core
    try:
        core.add_request(EngineRequest(request_id="a", prompt_token_ids=_prompts()[0],
                                       sampling_params=PARAMS[0]))
        core.step()
        kept = []
        for right in (False, True):
            seq = core.seqs["a"]
            nxt = reference[len(seq.output_token_ids)]
            seq.spec_token_ids = [nxt if right else (nxt + 1) % 256]
            batch = core.scheduler.schedule()
            launched = core.executor.execute(batch.output([]))
            core.scheduler.advance(batch, launched.rows)
            sampled, _ = launched.result()
            core.scheduler.resolve(batch, sampled)
            kept.append({str(row): tokens for row, tokens in sampled.items()})
        return kept
    finally:
        core.shutdown()


def main() -> None:
    root = Path(os.environ.get("CKPT_DIR", "/tmp/atom_tokens_ckpt"))
    out: dict[str, object] = {}
    for arch in ARCHS:
        path = root / arch
        if not path.exists():
            make_checkpoint(arch, root)
        for kernels in ("torch", "cpu"):
            out[f"{arch}/{kernels}"] = _generated(path, kernels)
        out[f"{arch}/verify"] = _verify_steps(path, out[f"{arch}/torch"][0])
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
