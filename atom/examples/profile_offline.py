"""`python -m atom.examples.profile_offline --model Qwen/Qwen3-0.6B --kv_cache_dtype fp8 ...`:
run one batch of generation under the torch profiler and leave its traces on disk.

Start-up (weights, KV sizing, CUDA-graph capture) stays outside the profiled window, so the trace
shows steady-state prefill and decode steps only; add --mark-trace for one trace per captured
graph size as well. Traces land in `{torch_profiler_dir}/rank_0/` (default ./profiler_traces).
"""
from __future__ import annotations

import argparse
import random
import time

from atom.config.report import config_errors_exit
from atom.engine_args import EngineArgs
from atom.log_setup import configure_logging
from atom.sampling_params import SamplingParams

DEFAULT_DIR = "./profiler_traces"
TEXT = ("The quick brown fox jumps over the lazy dog while the engine measures every kernel it "
        "launches, step after step, so that the slow ones show up in the trace. ")


def make_prompts(tokenizer, bs: int, input_length: int, random_input: bool,
                 vocab: int) -> list[list[int]]:
    """`bs` prompts of about `input_length` tokens: repeated predefined text, or random ids."""
    if random_input:
        rng = random.Random(0)
        return [[rng.randrange(10, vocab - 10) for _ in range(input_length)] for _ in range(bs)]
    ids = list(tokenizer.encode(TEXT * (input_length // 8 + 1)))[:input_length]
    return [ids for _ in range(bs)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--input-length", type=int, default=128,
                        help="approximate input prompt length in tokens")
    parser.add_argument("--output-length", type=int, default=32, help="output length in tokens")
    parser.add_argument("--bs", type=int, default=1, help="batch size (parallel requests)")
    parser.add_argument("--random-input", action="store_true",
                        help="random token ids instead of predefined text")
    args = parser.parse_args(argv)
    if args.torch_profiler_dir is None:
        args.torch_profiler_dir = DEFAULT_DIR
    return args


def main(argv=None) -> dict:
    configure_logging()
    args = parse_args(argv)
    with config_errors_exit():
        engine = EngineArgs.from_cli_args(args).create_engine()
    vocab = int(engine.config.model.hf_config.get("vocab_size", 32000) or 32000)
    prompts = make_prompts(engine.tokenizer, args.bs, args.input_length, args.random_input, vocab)
    params = SamplingParams(temperature=0, max_tokens=args.output_length, ignore_eos=True)
    engine.generate([prompts[0][:8]], SamplingParams(temperature=0, max_tokens=2))  # warm-up
    engine.start_profile()
    t0 = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - t0
    engine.stop_profile()
    total = sum(o["num_tokens_output"] for o in outputs)
    print(f"profiled {args.bs} x ({args.input_length} in, {args.output_length} out): {total} tokens "
          f"in {elapsed:.2f}s; traces under {args.torch_profiler_dir}/rank_0/")
    engine.shutdown()
    return {"tokens": total, "seconds": elapsed, "dir": args.torch_profiler_dir}


if __name__ == "__main__":
    main()
