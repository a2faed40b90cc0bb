"""Offline throughput on the nano-vllm workload: N sequences with input and output lengths uniform
in [min_len, max_len], random token ids, ignore_eos. Prints output tokens/s for atom and, in the
same run, for transformers' own batched generation on the same prompts, as a ratio.

  python -m atom.benchmarks.throughput --model tiny_llama --num-seqs 16 --max-len 256 load=dummy
  python -m atom.run job=throughput model=qwen3_0_6b load=dummy   (defaults: 256 seqs, 100..1024)
"""
from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

from atom.llm_engine import build_engine
from atom.config.model_facts import is_gguf
from atom.config.report import config_errors_exit
from atom.config.schema import Config
from atom.engine_args import EngineArgs
from atom.loader.hf_config import load_hf_config, model_source
from atom.runner.device import resolve_device, resolve_dtype
from atom.sampling_params import SamplingParams


@dataclass
class Workload:
    num_seqs: int = 256
    min_len: int = 100
    max_len: int = 1024
    seed: int = 0

    def make(self, vocab: int) -> tuple[list[list[int]], list[int]]:
        g = torch.Generator().manual_seed(self.seed)
        ins = torch.randint(self.min_len, self.max_len + 1, (self.num_seqs,), generator=g).tolist()
        outs = torch.randint(self.min_len, self.max_len + 1, (self.num_seqs,), generator=g).tolist()
        prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in ins]
        return prompts, outs


def run_atom(cfg: Config, prompts: list[list[int]], out_lens: list[int]) -> dict[str, Any]:
    engine = build_engine(cfg)
    engine.generate([prompts[0][:16]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    params = [SamplingParams(temperature=0.6, max_tokens=n, ignore_eos=True) for n in out_lens]
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    dt = time.perf_counter() - t0
    produced = sum(o["num_tokens_output"] for o in outs)
    return {"engine": "atom", "seconds": dt, "output_tokens": produced, "tok_s": produced / dt}


def run_transformers(cfg: Config, prompts: list[list[int]], out_lens: list[int]) -> dict[str, Any]:
    """transformers' continuous batching (`generate_batch`) on the same model and prompts; one
    max_new_tokens for all, the mean of the workload's, since generate_batch takes one."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    device = resolve_device(cfg)
    dtype = resolve_dtype(cfg, device)
    src = model_source(cfg)
    if src is None or cfg.load.dummy is not None:
        model = AutoModelForCausalLM.from_config(load_hf_config(cfg, snapshot=False), dtype=dtype)
    elif is_gguf(src):
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=dtype)
    model = model.to(device).eval()
    mean_out = int(sum(out_lens) / len(out_lens))
    gen = GenerationConfig(max_new_tokens=mean_out, min_new_tokens=mean_out, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
    t0 = time.perf_counter()
    with torch.inference_mode():
        result = model.generate_batch(inputs=prompts, generation_config=gen, progress_bar=False)
    dt = time.perf_counter() - t0
    produced = sum(len(r.generated_tokens) for r in result.values())
    return {"engine": "transformers.generate_batch", "seconds": dt, "output_tokens": produced,
            "tok_s": produced / dt}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def run(cfg: Config, workload: Optional[Workload] = None, with_transformers: bool = True) -> dict:
    workload = workload or Workload()
    vocab = int(load_hf_config(cfg).vocab_size)
    prompts, out_lens = workload.make(vocab)
    results = [run_atom(cfg, prompts, out_lens)]
    if with_transformers:
        results.append(run_transformers(cfg, prompts, out_lens))
    report = {"model": cfg.model.name, "workload": asdict(workload), "results": results,
              "commit": _commit(), "machine": platform.node(), "processor": platform.processor(),
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    for r in results:
        print(f"{r['engine']:>30}: {r['output_tokens']} tokens in {r['seconds']:.2f}s = "
              f"{r['tok_s']:.1f} output tok/s")
    if len(results) == 2:
        report["ratio_atom_over_transformers"] = results[0]["tok_s"] / results[1]["tok_s"]
        print(f"{'ratio':>30}: {report['ratio_atom_over_transformers']:.2f}x")
    return report


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    EngineArgs.add_cli_args(p)
    p.add_argument("--num-seqs", type=int, default=256)
    p.add_argument("--min-len", type=int, default=100)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--no-transformers", action="store_true")
    p.add_argument("--output-json", default=None)
    args = p.parse_args()
    with config_errors_exit():
        cfg = EngineArgs.from_cli_args(args).create_config()
    report = run(cfg, Workload(args.num_seqs, args.min_len, args.max_len), not args.no_transformers)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
