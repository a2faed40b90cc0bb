"""The benchmark's argparse flags, grouped; defaults follow the spec's "Key CLI arguments" table.

Kept apart from `benchmark_serving` so the flag table reads as one list. `atom.config.bench`
carries the same names (underscored) for Hydra sweeps.
"""
from __future__ import annotations

import argparse
from typing import Sequence


def add_server_args(parser: argparse.ArgumentParser, backends: Sequence[str]) -> None:
    g = parser.add_argument_group("server")
    g.add_argument("--backend", type=str, default="vllm", choices=list(backends))
    g.add_argument("--base-url", type=str, default=None,
                   help="Server base URL, e.g. http://localhost:8000 (overrides --host/--port).")
    g.add_argument("--host", type=str, default="127.0.0.1")
    g.add_argument("--port", type=int, default=8000)
    g.add_argument("--endpoint", type=str, default="/v1/completions",
                   help="API path. Left at the default, tgi / tensorrt-llm / deepspeed-mii / "
                        "openai-chat use their own protocol's path.")
    g.add_argument("--model", type=str, required=True, help="Model name or path.")
    g.add_argument("--served-model-name", type=str, default=None,
                   help="Name sent in requests when it differs from --model.")
    g.add_argument("--tokenizer", type=str, default=None,
                   help="Local tokenizer directory (defaults to --model; nothing is downloaded).")
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--api-key", type=str, default=None, help="Bearer token for the server.")
    g.add_argument("--extra-body", type=str, default=None,
                   help="JSON object merged into every request body.")


def add_dataset_args(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    g = parser.add_argument_group("dataset")
    g.add_argument("--dataset-name", type=str, default="sharegpt", choices=list(names))
    g.add_argument("--dataset-path", type=str, default=None,
                   help="Local dataset file or directory (sonnet defaults to the shipped text).")
    g.add_argument("--num-prompts", type=int, default=1000)
    g.add_argument("--use-chat-template", action="store_true",
                   help="Wrap random / sonnet prompts in the tokenizer's chat template.")
    g.add_argument("--random-input-len", type=int, default=1024)
    g.add_argument("--random-output-len", type=int, default=128)
    g.add_argument("--random-range-ratio", type=float, default=1.0,
                   help="Lengths are uniform in [len·ratio, len]; 1.0 = fixed lengths.")
    g.add_argument("--random-prefix-len", type=int, default=0,
                   help="Tokens of random prefix shared by every prompt.")
    g.add_argument("--sharegpt-output-len", type=int, default=None)
    g.add_argument("--sonnet-input-len", type=int, default=550)
    g.add_argument("--sonnet-output-len", type=int, default=150)
    g.add_argument("--sonnet-prefix-len", type=int, default=200)
    g.add_argument("--burstgpt-model", type=str, default=None,
                   help="Keep only BurstGPT rows of this Model (e.g. GPT-4).")
    g.add_argument("--hf-split", type=str, default="train")
    g.add_argument("--hf-output-len", type=int, default=None)


def add_run_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("run and report")
    g.add_argument("--request-rate", type=float, default=float("inf"),
                   help="Requests per second; inf sends everything at once.")
    g.add_argument("--burstiness", type=float, default=1.0,
                   help="Gamma shape of inter-arrival times; 1.0 = Poisson, <1 burstier.")
    g.add_argument("--max-concurrency", type=int, default=None)
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--logprobs", type=int, default=None)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--disable-tqdm", action="store_true")
    g.add_argument("--profile", action="store_true",
                   help="POST /start_profile before and /stop_profile after the run.")
    g.add_argument("--save-result", action="store_true")
    g.add_argument("--save-detailed", action="store_true",
                   help="Also save every generated text.")
    g.add_argument("--result-dir", type=str, default=None)
    g.add_argument("--result-filename", type=str, default=None)
    g.add_argument("--metadata", metavar="KEY=VALUE", nargs="*", default=None,
                   help="Recorded in the result JSON.")
    g.add_argument("--label", type=str, default=None,
                   help="Series name in sweep plots (default: backend:model).")
    g.add_argument("--percentile-metrics", type=str, default="ttft,tpot,itl",
                   help="Comma-separated subset of ttft,tpot,itl,e2el to print.")
    g.add_argument("--metric-percentiles", type=str, default="99",
                   help="Comma-separated percentiles, e.g. 25,50,75,99.")
    g.add_argument("--goodput", nargs="+", default=None, metavar="KEY:VALUE",
                   help="SLOs in ms, e.g. ttft:100 tpot:50 (keys: ttft, tpot, e2el).")
