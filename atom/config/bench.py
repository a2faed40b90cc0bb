"""The `bench` group: one serving-benchmark run (used by `python -m atom.bench`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class BenchConfig:
    backend: str = "vllm"
    base_url: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 8000
    endpoint: str = "/v1/completions"
    dataset_name: str = "random"
    dataset_path: Optional[str] = None
    num_prompts: int = 1000
    request_rate: float = float("inf")
    burstiness: float = 1.0
    max_concurrency: Optional[int] = None
    ignore_eos: bool = True
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 1.0
    random_prefix_len: int = 0
    seed: int = 0
