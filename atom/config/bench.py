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
    # server
    backend: str = "vllm"
    base_url: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 8000
    endpoint: str = "/v1/completions"
    model: Optional[str] = None  # None: the root config's model.served_model_name, else model.name
    served_model_name: Optional[str] = None
    tokenizer: Optional[str] = None  # local dir; None: model.tokenizer, else model.path
    trust_remote_code: bool = False
    api_key: Optional[str] = None
    extra_body: Optional[dict[str, Any]] = None
    # Start atom's server for each sweep point from that point's non-bench overrides, on a free
    # loopback port (base_url/host/port are then ignored), and stop it afterwards.
    launch_server: bool = False
    # Keep a launched server for the next point when its server-side overrides are the same
    # (false: a fresh server per point, e.g. so no prefix cache carries over).
    reuse_server: bool = True
    server_startup_timeout_s: float = 600.0
    # dataset
    dataset_name: str = "random"
    dataset_path: Optional[str] = None
    num_prompts: int = 1000
    # When set, num_prompts = max_concurrency × this, so a concurrency sweep keeps every point
    # equally long in "rounds" (the spec's example uses CONC * 10).
    prompts_per_concurrency: Optional[int] = None
    use_chat_template: bool = False
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 1.0
    random_prefix_len: int = 0
    sharegpt_output_len: Optional[int] = None
    sonnet_input_len: int = 550
    sonnet_output_len: int = 150
    sonnet_prefix_len: int = 200
    burstgpt_model: Optional[str] = None
    hf_split: str = "train"
    hf_output_len: Optional[int] = None
    # run and report
    request_rate: float = float("inf")
    burstiness: float = 1.0
    max_concurrency: Optional[int] = None
    ignore_eos: bool = True
    logprobs: Optional[int] = None
    seed: int = 0
    disable_tqdm: bool = False
    profile: bool = False
    save_result: bool = True
    save_detailed: bool = False
    result_dir: Optional[str] = None  # None: the Hydra job's output directory
    result_filename: Optional[str] = "result.json"
    label: Optional[str] = None  # series name in sweep plots; None: backend:model
    metadata: dict[str, str] = field(default_factory=dict)
    percentile_metrics: list[str] = field(default_factory=lambda: ["ttft", "tpot", "itl", "e2el"])
    metric_percentiles: list[float] = field(default_factory=lambda: [50.0, 90.0, 99.0])
    goodput: Optional[dict[str, float]] = None  # SLOs in ms, e.g. {ttft: 100, tpot: 50}
