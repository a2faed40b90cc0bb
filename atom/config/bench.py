"""The `bench` group: one serving-benchmark run (used by `python -m atom.bench`).

Field names are the benchmark CLI's flags with underscores, so `bench.max_concurrency=64` means
`--max-concurrency 64`. Defaults follow the spec's table except where a sweep wants otherwise
(random dataset, EOS ignored, results saved). Lists and dicts replace the CLI's comma strings so
Hydra's multirun syntax (`a=1,2`) never splits them by accident.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class BenchConfig:
    # -- server --
    backend: str = "vllm"  # the request protocol (vllm, openai-chat, tgi, ...)
    base_url: Optional[str] = None  # e.g. http://localhost:8000; overrides host and port
    host: str = "127.0.0.1"  # the server's host when base_url is unset
    port: int = 8000  # the server's HTTP port when base_url is unset
    endpoint: str = "/v1/completions"  # the API path requests go to
    model: Optional[str] = None  # None: the root config's model.served_model_name, else model.name
    served_model_name: Optional[str] = None  # the name sent in requests when it differs
    # a local dir, a .gguf, a conf/model entry or served name, or `bytes`; None: model.tokenizer,
    # else model.path, else the model's name
    tokenizer: Optional[str] = None
    trust_remote_code: bool = False  # let transformers run the tokenizer's own Python code
    api_key: Optional[str] = None  # bearer token sent to the server
    extra_body: Optional[dict[str, Any]] = None  # merged into every request body
    # Start atom's server for each sweep point from that point's non-bench overrides, on a free
    # loopback port (base_url/host/port are then ignored), and stop it afterwards.
    launch_server: bool = False
    # Keep a launched server for the next point when its server-side overrides are the same
    # (false: a fresh server per point, e.g. so no prefix cache carries over).
    reuse_server: bool = True
    server_startup_timeout_s: float = 600.0  # seconds a launched server may take to be ready
    # -- dataset --
    dataset_name: str = "random"  # random | sharegpt | sonnet | burstgpt | hf
    dataset_path: Optional[str] = None  # a local dataset file (sonnet: the shipped text)
    num_prompts: int = 1000  # requests sent
    # When set, num_prompts = max_concurrency × this, so a concurrency sweep keeps every point
    # equally long in "rounds" (the spec's example uses CONC * 10).
    prompts_per_concurrency: Optional[int] = None
    use_chat_template: bool = False  # wrap random / sonnet prompts in the chat template
    random_input_len: int = 1024  # prompt tokens (random dataset)
    random_output_len: int = 128  # output tokens (random dataset)
    random_range_ratio: float = 1.0  # lengths uniform in [len x ratio, len]; 1.0: fixed
    random_prefix_len: int = 0  # random prefix tokens shared by every prompt
    sharegpt_output_len: Optional[int] = None  # output tokens; None: the conversation's own
    sonnet_input_len: int = 550  # prompt tokens (sonnet dataset)
    sonnet_output_len: int = 150  # output tokens (sonnet dataset)
    sonnet_prefix_len: int = 200  # shared prefix tokens (sonnet dataset)
    burstgpt_model: Optional[str] = None  # keep only BurstGPT rows of this model (e.g. GPT-4)
    hf_split: str = "train"  # the split of a Hugging Face dataset file
    hf_output_len: Optional[int] = None  # output tokens; None: the dataset's own
    # -- run and report --
    request_rate: float = float("inf")  # requests per second; inf sends them all at once
    burstiness: float = 1.0  # gamma shape of inter-arrival times; 1.0: Poisson, < 1 burstier
    max_concurrency: Optional[int] = None  # requests in flight at most; None: no limit
    ignore_eos: bool = True  # generate the full output length past EOS
    logprobs: Optional[int] = None  # logprobs asked for per token
    seed: int = 0  # the dataset sampler's seed
    disable_tqdm: bool = False  # no progress bar
    profile: bool = False  # POST /start_profile before and /stop_profile after the run
    save_result: bool = True  # write the result JSON
    save_detailed: bool = False  # also save every generated text
    result_dir: Optional[str] = None  # None: output_dir (a sweep point's), else the cwd
    result_filename: Optional[str] = "result.json"  # None: named after backend, rate and model
    label: Optional[str] = None  # series name in sweep plots; None: backend:model
    metadata: dict[str, str] = field(default_factory=dict)  # recorded in the result JSON
    # latencies reported (ttft, tpot, itl, e2el)
    percentile_metrics: list[str] = field(default_factory=lambda: ["ttft", "tpot", "itl", "e2el"])
    # percentiles reported for each
    metric_percentiles: list[float] = field(default_factory=lambda: [50.0, 90.0, 99.0])
    goodput: Optional[dict[str, float]] = None  # SLOs in ms, e.g. {ttft: 100, tpot: 50}
