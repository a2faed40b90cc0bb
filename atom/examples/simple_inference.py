"""`python -m atom.examples.simple_inference [--model ...] [--temperature 0.6]`: load a model,
apply its chat template to four built-in prompts, warm up, generate a batch and print it."""
from __future__ import annotations

import argparse
import time
from typing import Any

from atom.llm_engine import build_engine
from atom.config.report import config_errors_exit
from atom.config.schema import Config
from atom.engine_args import EngineArgs
from atom.log_setup import configure_logging
from atom.sampling_params import SamplingParams

PROMPTS = [
    "Introduce yourself in one sentence.",
    "List all prime numbers within 100.",
    "用一句话介绍一下你自己。",
    "请列出100以内的所有素数。",
]


def render(tokenizer: Any, question: str) -> str:
    """The chat template with thinking on where the template has the switch."""
    messages = [{"role": "user", "content": question}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=True)
    return question


def generate(engine: Any, temperature: float, max_tokens: int = 256) -> list[dict]:
    prompts = [render(engine.tokenizer, q) for q in PROMPTS]
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    engine.generate(["warmup"], SamplingParams(temperature=0, max_tokens=4))
    t0 = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - t0
    for q, out in zip(PROMPTS, outputs):
        print(f"\nPrompt: {q!r}\nCompletion: {out['text']!r}\n"
              f"  ({out['num_tokens_input']} in, {out['num_tokens_output']} out, "
              f"ttft {out['ttft']:.3f}s, tpot {out['tpot'] * 1e3:.1f} ms, {out['finish_reason']})")
    total = sum(o["num_tokens_output"] for o in outputs)
    print(f"\n{total} tokens in {elapsed:.2f}s ({total / elapsed:.1f} tok/s)")
    engine.print_mtp_statistics()
    return outputs


def run(cfg: Config, temperature: float = 0.6) -> list[dict]:
    """`python -m atom.run job=generate`: the same example from a composed config."""
    engine = build_engine(cfg)
    try:
        return generate(engine, temperature)
    finally:
        engine.shutdown()  # stops the ranks, those on other hosts included


def main() -> None:
    configure_logging()
    parser = argparse.ArgumentParser(description=__doc__)
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    with config_errors_exit():
        engine = EngineArgs.from_cli_args(args).create_engine()
    try:
        generate(engine, args.temperature, args.max_tokens)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
