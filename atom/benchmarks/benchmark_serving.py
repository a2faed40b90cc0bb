"""Online serving benchmark: `python -m atom.benchmarks.benchmark_serving --backend vllm ...`.

Sends a dataset's prompts to a running server at a chosen arrival rate (Poisson, or gamma with
`--burstiness`), optionally capped at `--max-concurrency`, and reports TTFT / TPOT / ITL / E2EL,
throughput, goodput, concurrency, the ITL/TPOT merge factor and — when the server has speculative
decoding on — acceptance from `/debug/mtp_stats`. The CLI mirrors vLLM's so a command line moves
between engines unchanged; `atom.bench` drives the same `main` from a Hydra config.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from datetime import datetime
from pathlib import Path
from typing import Any, AsyncIterator, Optional, Sequence

import aiohttp
import numpy as np
from tqdm.asyncio import tqdm

from atom.benchmarks.backend_request_func import (
    AIOHTTP_TIMEOUT, ASYNC_REQUEST_FUNCS, DEFAULT_ENDPOINTS, RequestFuncInput, RequestFuncOutput,
)
from atom.benchmarks.benchmark_datasets import DATASET_NAMES, SampleRequest, get_samples
from atom.benchmarks.benchmark_utils import (
    convert_to_pytorch_benchmark_format, default_result_filename, pytorch_format_path,
    write_to_json,
)
from atom.benchmarks.metrics import (  # noqa: F401  (BenchmarkMetrics is part of this module's API)
    LATENCY_METRICS, BenchmarkMetrics, calculate_metrics, parse_goodput,
)
from atom.benchmarks.cli_args import add_dataset_args, add_run_args, add_server_args
from atom.benchmarks.report import format_report, metrics_dict, per_request_dict, spec_decode_dict
from atom.benchmarks.spec_decode_stats import fetch_mtp_stats, spec_decode_delta
from atom.benchmarks.tokenizer_source import get_tokenizer

SPEC_DEFAULT_ENDPOINT = "/v1/completions"
# Below the server's default keep-alive (5 s), so an idle pooled socket is dropped by the client
# first instead of being reused after the server closed it.
CLIENT_KEEPALIVE_S = 4.0


async def get_request(
    input_requests: Sequence[SampleRequest], request_rate: float, burstiness: float = 1.0,
    seed: int = 0,
) -> AsyncIterator[SampleRequest]:
    """Yield requests on a gamma arrival process (shape = burstiness; 1.0 is Poisson), scheduled
    against absolute times so a slow consumer does not stretch the run."""
    if burstiness <= 0:
        raise ValueError(f"--burstiness must be > 0, got {burstiness}")
    if not math.isinf(request_rate) and request_rate <= 0:
        raise ValueError(f"--request-rate must be > 0 or inf, got {request_rate}")
    rng = np.random.default_rng(seed)
    start, offset = time.perf_counter(), 0.0
    for i, request in enumerate(input_requests):
        if not math.isinf(request_rate) and i > 0:
            offset += float(rng.gamma(burstiness, 1.0 / (request_rate * burstiness)))
            await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        yield request


async def _post_control(session: aiohttp.ClientSession, url: str, api_key: Optional[str]) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None  # the server guards it
    async with session.post(url, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"POST {url} -> HTTP {resp.status}: {(await resp.text())[:300]}")


def _request_input(args: argparse.Namespace, req: SampleRequest, api_url: str) -> RequestFuncInput:
    return RequestFuncInput(
        prompt=req.prompt, api_url=api_url, prompt_len=req.prompt_len,
        output_len=req.expected_output_len, model=args.model, model_name=args.served_model_name,
        logprobs=args.logprobs, extra_body=args.extra_body, ignore_eos=args.ignore_eos,
        api_key=args.api_key,
    )


async def _send_all(args: argparse.Namespace, session: aiohttp.ClientSession, api_url: str,
                    requests: Sequence[SampleRequest]) -> tuple[list[RequestFuncOutput], float]:
    request_func = ASYNC_REQUEST_FUNCS[args.backend]
    semaphore = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
    pbar = tqdm(total=len(requests), disable=args.disable_tqdm)

    async def one(inp: RequestFuncInput) -> RequestFuncOutput:
        if semaphore is None:
            out = await request_func(inp, session)
        else:
            async with semaphore:
                out = await request_func(inp, session)
        pbar.update(1)
        return out

    start = time.perf_counter()
    tasks = []
    async for req in get_request(requests, args.request_rate, args.burstiness, args.seed):
        tasks.append(asyncio.create_task(one(_request_input(args, req, api_url))))
    outputs = await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    pbar.close()
    return list(outputs), duration


async def benchmark(args: argparse.Namespace, requests: Sequence[SampleRequest], tokenizer: Any,
                    api_url: str, base_url: str) -> dict[str, Any]:
    """One run: a single-prompt check, then every request; returns the result dictionary."""
    connector = aiohttp.TCPConnector(limit=args.max_concurrency or 0,
                                     keepalive_timeout=CLIENT_KEEPALIVE_S)
    async with aiohttp.ClientSession(connector=connector, timeout=AIOHTTP_TIMEOUT) as session:
        print("Starting initial single prompt test run...")
        test = await ASYNC_REQUEST_FUNCS[args.backend](_request_input(args, requests[0], api_url), session)
        if not test.success:
            raise RuntimeError(f"Initial test run failed - check the server and arguments. Error: {test.error}")
        print("Initial test run completed. Starting main benchmark run...")
        if args.profile:
            await _post_control(session, base_url + "/start_profile", args.api_key)
            print("Profiler started")
        mtp_before = await fetch_mtp_stats(session, base_url, args.api_key)
        outputs, duration = await _send_all(args, session, api_url, requests)
        if args.profile:
            await _post_control(session, base_url + "/stop_profile", args.api_key)
            print("Profiler stopped")
        mtp_after = await fetch_mtp_stats(session, base_url, args.api_key)
    return summarize(args, requests, outputs, duration, tokenizer, spec_decode_delta(mtp_before, mtp_after))


def summarize(args: argparse.Namespace, requests: Sequence[SampleRequest],
              outputs: Sequence[RequestFuncOutput], duration: float, tokenizer: Any,
              spec: Any = None) -> dict[str, Any]:
    """Metrics → printed report + result dictionary (run settings, metrics, per-request data)."""
    slos = parse_goodput(args.goodput)
    percentiles = [float(p) for p in str(args.metric_percentiles).split(",")]
    metrics, output_lens = calculate_metrics(requests, outputs, duration, tokenizer, percentiles, slos)
    selected = [m.strip() for m in str(args.percentile_metrics).split(",")]
    print(format_report(metrics, selected, spec, args.max_concurrency, args.request_rate,
                        byte_tokenizer=(args.tokenizer or args.model) == "bytes"))
    return {
        **run_info(args),
        **metrics_dict(metrics, slos),
        "spec_decode": spec_decode_dict(spec),
        **per_request_dict(requests, outputs, output_lens, args.save_detailed),
    }


def run_info(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": args.backend,
        "label": args.label or f"{args.backend}:{args.served_model_name or args.model}",
        "model_id": args.model,
        "served_model_name": args.served_model_name,
        "tokenizer_id": args.tokenizer or args.model,
        "dataset_name": args.dataset_name,
        "num_prompts": args.num_prompts,
        "request_rate": args.request_rate,
        "burstiness": args.burstiness,
        "max_concurrency": args.max_concurrency,
        "ignore_eos": args.ignore_eos,
        "metadata": dict(kv.split("=", 1) for kv in args.metadata or []),
    }


def resolve_urls(args: argparse.Namespace) -> tuple[str, str]:
    """(api_url, base_url). A backend whose protocol lives elsewhere (TGI, TRT-LLM, MII, chat)
    gets its usual path when --endpoint is left at the default."""
    endpoint = args.endpoint
    if endpoint == SPEC_DEFAULT_ENDPOINT and args.backend in DEFAULT_ENDPOINTS:
        endpoint = DEFAULT_ENDPOINTS[args.backend]
    base_url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    return base_url + endpoint, base_url


def save_result(args: argparse.Namespace, result: dict[str, Any]) -> Path:
    """The result JSON plus its PyTorch-benchmark-format twin (`<name>.pytorch.json`)."""
    name = args.result_filename or default_result_filename(
        args.backend, args.request_rate, args.max_concurrency, args.model, result["date"])
    path = Path(args.result_dir or ".") / name
    write_to_json(path, result | {"args": vars(args)})
    keys = ["request_throughput", "output_throughput", "total_token_throughput"] + [
        k for k in result if k.endswith("_ms") and not k.startswith("goodput")]
    per_metric = {k: [result[k]] for k in keys}
    extra = {k: v for k, v in result.items() if k not in per_metric and not isinstance(v, (list, dict))}
    write_to_json(pytorch_format_path(path), convert_to_pytorch_benchmark_format(args, per_metric, extra))
    print(f"Saved result to {path}")
    return path


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark described by parsed CLI args; returns the result dictionary."""
    if args.backend not in ASYNC_REQUEST_FUNCS:
        raise ValueError(f"unknown backend {args.backend!r}; choose from {sorted(ASYNC_REQUEST_FUNCS)}")
    if isinstance(args.extra_body, str):
        args.extra_body = json.loads(args.extra_body)
    parse_goodput(args.goodput)  # fail before any request is sent
    unknown = set(m.strip() for m in args.percentile_metrics.split(",")) - set(LATENCY_METRICS)
    if unknown:
        raise ValueError(f"--percentile-metrics: unknown {sorted(unknown)}; choose from {LATENCY_METRICS}")
    tokenizer = get_tokenizer(args.tokenizer or args.model, args.trust_remote_code)
    requests = get_samples(args, tokenizer)
    if not requests:
        raise ValueError("no requests to send: --num-prompts must be >= 1")
    api_url, base_url = resolve_urls(args)
    result = asyncio.run(benchmark(args, requests, tokenizer, api_url, base_url))
    if args.save_result:
        result["result_path"] = str(save_result(args, result))
    return result


def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every flag of the spec's "Key CLI arguments" table with its default, plus the dataset
    options; shared with `atom.bench`, which fills the same names from `cfg.bench`."""
    add_server_args(parser, sorted(ASYNC_REQUEST_FUNCS))
    add_dataset_args(parser, DATASET_NAMES)
    add_run_args(parser)
    return parser


def make_parser() -> argparse.ArgumentParser:
    return add_cli_args(argparse.ArgumentParser(description="Benchmark the online serving throughput."))


def default_args(**overrides: Any) -> argparse.Namespace:
    """The CLI's defaults with some fields replaced (the `--model` requirement is lifted)."""
    args = make_parser().parse_args(["--model", str(overrides.get("model", ""))])
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise AttributeError(f"benchmark_serving has no option {key!r}")
        setattr(args, key, value)
    return args


def cli(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    return main(make_parser().parse_args(argv))


if __name__ == "__main__":
    cli()
