"""Cross-field rules, checked before anything heavy (no weights are read here).

Every broken rule is collected and reported at once (ConfigError.all_of), most fundamental first:
the model and how its weights arrive, then the groups that size and run it, so the first line is
the one to fix first and no fix reveals a rule the previous launch did not mention.
"""
from __future__ import annotations

import importlib.util
import json
import os
from typing import Callable, Optional

from atom.config.errors import ConfigError
from atom.config.format import TOOL_CALL_PARSERS, REASONING_DIALECTS
from atom.config.hosts import resolve_hosts
from atom.config.model_facts import (ArchitectureShape, check_architecture, local_source,
                                     read_architecture_shape, remote_code_tokenizer)
from atom.config.quant import BLOCK, checkpoint_quant_config, resolve_scheme
from atom.config.schema import Config

KV_DTYPES = ("bf16", "fp8")
KERNEL_BACKENDS = ("auto", "torch", "cpu", "triton", "aiter")
DEVICES = ("auto", "cpu", "cuda")
DUMMY_KINDS = (None, "empty", "zero", "xavier")
LOAD_FORMATS = ("auto", "safetensors", "gguf")
SPEC_METHODS = (None, "ngram", "mtp", "eagle3", "draft_model")
EAGLE3_HEAD = "LlamaForCausalLMEagle3"
# Targets whose decoder layers take (positions, x, residual): the head's capture hooks read them.
EAGLE3_TARGETS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                  "Qwen3ForCausalLM")
MTP_ARCHITECTURES = ("DeepseekV3ForCausalLM",)  # those whose next-n layer atom builds
# MoE models whose decoder layers gather their MLP rows over the ranks (atom/layers/dp_attention.py)
DP_ATTENTION_ARCHITECTURES = ("Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM")
JOBS = ("serve", "generate", "throughput", "bench")
ENGINE_SOURCES = ("model", "synthetic", "scripted")


class _Rules:
    """The broken rules found so far, in the order they were checked."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def check(self, ok: bool, field: str, value: object, rule: str) -> bool:
        if not ok:
            self.errors.append(ConfigError(field, value, rule))
        return ok

    def one_of(self, field: str, value: object, allowed: tuple) -> bool:
        return self.check(value in allowed, field, value,
                          f"must be one of {', '.join(map(str, allowed))}")

    def run(self, rule: Callable[[], object]) -> None:
        """A rule that raises its own ConfigError (e.g. the model registry's)."""
        try:
            rule()
        except ConfigError as e:
            self.errors.extend(e.errors)


def builds_model_engine(cfg: Config) -> bool:
    """Whether this job runs the model itself (not a stand-in core, not a benchmark client)."""
    return cfg.job != "bench" and (cfg.job != "serve" or cfg.server.engine_source == "model")


def problems(cfg: Config, launching: bool = False) -> list[ConfigError]:
    """Every rule `cfg` breaks. `launching`: the config is about to run, so what composes but the
    model engine cannot run yet (engine_problems) is an error too."""
    rules = _Rules()
    rules.one_of("job", cfg.job, JOBS)
    shape = _validate_model(cfg, rules)
    _validate_load(cfg, rules)
    _validate_quant(cfg, rules)
    _validate_parallel(cfg, rules, shape)
    if launching and builds_model_engine(cfg):
        rules.errors.extend(engine_problems(cfg))
    _validate_kv(cfg, rules)
    _validate_scheduler(cfg, rules)
    _validate_runtime(cfg, rules)
    _validate_specdecode(cfg, rules)
    _validate_server(cfg, rules)
    _validate_format(cfg, rules)
    return rules.errors


def validate(cfg: Config, launching: bool = False) -> Config:
    """Check every rule that needs no weights; raise them all at once, or return cfg."""
    errors = problems(cfg, launching)
    if errors:
        raise ConfigError.all_of(errors)
    return cfg


def engine_problems(cfg: Config) -> list[ConfigError]:
    """Settings that compose (benchmark configs and synthetic servers name them) but that the
    model engine does not implement or this host cannot hold: the Ray executor without ray,
    replicas over several hosts, more ranks than GPUs, experts over several replicas, DP
    attention outside the layout it is built for, and speculative decoding drafts the engine
    cannot run beside the target."""
    rules = _Rules()
    p = cfg.parallel
    _refuse_unbuilt_executors(cfg, rules)
    _devices_fit(cfg, rules)
    rules.check(not p.enable_expert_parallel or p.data_parallel_size == 1,
                "parallel.enable_expert_parallel", True,
                "experts split over one replica's tensor-parallel ranks; over "
                f"data_parallel_size={p.data_parallel_size} replicas, not implemented yet "
                "(enable_dp_attention splits one replica's attention by sequence instead)")
    _validate_dp_attention(cfg, rules)
    if (cfg.specdecode.method in ("draft_model", "eagle3")
            and cfg.specdecode.draft_model is not None):
        _validate_draft_model(cfg, rules)
    if cfg.specdecode.method == "mtp":
        shape = read_architecture_shape(cfg)  # config.json / header only
        if rules.check(shape is not None and shape.num_nextn_predict_layers >= 1,
                       "specdecode.method", "mtp", "the model has no next-n (MTP) layers: its "
                       "config's num_nextn_predict_layers is 0 or absent (DeepSeek-V3/R1 have "
                       "one)"):
            rules.check(shape.architecture in MTP_ARCHITECTURES, "specdecode.method", "mtp",
                        f"next-n layers of {shape.architecture} are not implemented yet "
                        f"(mtp runs {', '.join(MTP_ARCHITECTURES)})")
    return rules.errors


def _validate_dp_attention(cfg: Config, rules: _Rules) -> None:
    """DP attention as built: the tensor-parallel ranks of one engine core (one scheduler, so
    the ranks step together), an MoE model whose layers gather their MLP rows, no drafts (the
    drafters' forwards do not gather), and worker processes that are the ranks."""
    p = cfg.parallel
    if not p.enable_dp_attention:
        return
    rules.check(p.tensor_parallel_size > 1, "parallel.tensor_parallel_size",
                p.tensor_parallel_size, "enable_dp_attention spreads the sequences over the "
                "tensor-parallel ranks: it needs more than one")
    rules.check(p.data_parallel_size == 1, "parallel.data_parallel_size", p.data_parallel_size,
                "enable_dp_attention runs inside one engine core (its ranks are the "
                "tensor-parallel ones); replicas of such cores are not implemented yet")
    rules.check(p.executor in ("auto", "multiproc"), "parallel.executor", p.executor,
                "enable_dp_attention runs on the multiproc executor's ranks (auto or multiproc)")
    rules.check(cfg.specdecode.method is None, "specdecode.method", cfg.specdecode.method,
                "not with parallel.enable_dp_attention: the drafters' forwards run on one "
                "rank's rows without the MLP's gather (set specdecode=none)")
    shape = read_architecture_shape(cfg)
    if shape is not None:
        rules.check(shape.architecture in DP_ATTENTION_ARCHITECTURES,
                    "parallel.enable_dp_attention", True,
                    f"not implemented for {shape.architecture} (built for "
                    f"{', '.join(DP_ATTENTION_ARCHITECTURES)})")


def _json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _tokenizer_vocab(folder: str) -> Optional[dict]:
    """tokenizer.json's token → id map, its added (special) tokens included; None where the
    folder has none."""
    tok = _json(os.path.join(folder, "tokenizer.json"))
    vocab = (tok or {}).get("model", {}).get("vocab")
    if not isinstance(vocab, dict):
        return None
    return {**vocab, **{a["content"]: a["id"] for a in tok.get("added_tokens") or ()}}


def _validate_draft_model(cfg: Config, rules: _Rules) -> None:
    """The draft checkpoint (config.json and tokenizer files only): one atom runs (an EAGLE-3
    head over a Llama/Qwen target of its hidden size, for eagle3), with the target's
    vocabulary, since its drafts are token ids the target verifies and its q is compared with
    the target's p id by id. A draft model's config may pad the vocabulary to another size
    (Qwen2.5-0.5B: 151936, 7B: 152064) where both tokenizers are the same and both sizes hold
    every id of it: its logits are cut or padded to the target's."""
    field, draft = "specdecode.draft_model", cfg.specdecode.draft_model
    if not rules.check(os.path.isdir(draft), field, draft, "not a checkpoint directory"):
        return
    dcfg = _json(os.path.join(draft, "config.json"))
    if not rules.check(dcfg is not None, field, draft, "has no readable config.json"):
        return
    arch = (dcfg.get("architectures") or ["?"])[0]
    src = local_source(cfg)
    target = (cfg.model.hf_config if src is None and cfg.model.hf_config else
              _json(os.path.join(str(src), "config.json")) if src is not None and src.is_dir()
              else None)
    if cfg.specdecode.method == "eagle3":
        rules.check(arch == EAGLE3_HEAD, field, draft,
                    f"the draft's architecture {arch} is no EAGLE-3 head ({EAGLE3_HEAD})")
        shape = read_architecture_shape(cfg)
        if shape is not None:
            rules.check(shape.architecture in EAGLE3_TARGETS, "specdecode.method", "eagle3",
                        f"EAGLE-3 over {shape.architecture} is not implemented "
                        f"(targets: {', '.join(EAGLE3_TARGETS)})")
        if target is not None and "hidden_size" in target:
            want = dcfg.get("target_hidden_size") or dcfg.get("hidden_size")
            rules.check(dcfg.get("hidden_size") == target["hidden_size"] == want, field, draft,
                        f"the head's hidden_size {dcfg.get('hidden_size')} is not the "
                        f"target's {target['hidden_size']}")
    else:
        try:
            check_architecture(arch)
        except ConfigError as e:
            rules.check(False, field, draft, f"the draft's {e.errors[0].rule}")
    tok_dir = cfg.model.tokenizer or (str(src) if src is not None and src.is_dir() else None)
    mine, theirs = _tokenizer_vocab(draft), tok_dir and _tokenizer_vocab(tok_dir)
    if mine is not None and theirs is not None:
        rules.check(mine == theirs, field, draft,
                    "the draft's tokenizer vocabulary is not the target's")
    if target is None or "vocab_size" not in target:
        return
    dv, tv = dcfg.get("vocab_size"), target["vocab_size"]
    if cfg.specdecode.method == "draft_model" and mine is not None and mine == theirs:
        size = max(mine.values()) + 1
        rules.check(isinstance(dv, int) and dv >= size and tv >= size, field, draft,
                    f"the draft's vocab_size {dv} or the target's {tv} is short of their "
                    f"tokenizer's {size} ids")
    else:
        rules.check(dv == tv, field, draft,
                    f"the draft's vocab_size {dv} is not the target's {tv}")


def _refuse_unbuilt_executors(cfg: Config, rules: _Rules) -> None:
    p = cfg.parallel
    rules.check(p.executor != "ray" or importlib.util.find_spec("ray") is not None,
                "parallel.executor", p.executor,
                "needs the ray package, which is not installed (pip install 'atom[ray]')")
    try:
        hosts = resolve_hosts(p, os.environ)
    except ConfigError:
        return  # reported by _validate_hosts
    rules.check(p.data_parallel_size == 1 or not hosts.multi, "parallel.data_parallel_size",
                p.data_parallel_size, "not implemented yet over several hosts (nnodes > 1): "
                "replicas run on one host")


def _devices_fit(cfg: Config, rules: _Rules) -> None:
    """On GPUs every rank of this host has its own device: dp x tp / nnodes of them. Asked of
    torch only when there is more than one rank, so a one-GPU start does not import it here."""
    p = cfg.parallel
    try:
        nnodes = resolve_hosts(p, os.environ).nnodes
    except ConfigError:
        return
    ranks = p.data_parallel_size * p.tensor_parallel_size // max(1, nnodes)
    if ranks <= 1 or cfg.runtime.device == "cpu" or p.executor == "ray":
        return  # Ray's ranks take the cluster's GPUs, not this host's
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        return  # device auto on a host without GPUs: the ranks share its CPUs
    field = "parallel.data_parallel_size" if p.data_parallel_size > 1 else \
        "parallel.tensor_parallel_size"
    rules.check(ranks <= gpus, field, getattr(p, field.split(".")[1]),
                f"data_parallel_size x tensor_parallel_size / nnodes = {ranks} ranks on this "
                f"host, which has {gpus} GPUs")


def _validate_model(cfg: Config, rules: _Rules) -> Optional[ArchitectureShape]:
    """The model first: whether it exists and is implemented decides whether anything else
    matters. Returns its shape (heads) when a config.json, GGUF header or hf_config gives one."""
    m = cfg.model
    if m.path is not None and cfg.load.dummy is None:
        rules.check(os.path.exists(m.path), "model.path", m.path, "path does not exist")
    rules.check(m.path is not None or bool(m.hf_config) or m.pypi_wheel is not None,
                "model.path", None,
                "a model needs a path, an hf_config (with load.dummy) or an embedded source")
    shape = read_architecture_shape(cfg)
    if shape is not None:
        rules.run(lambda: check_architecture(shape.architecture))
    custom = None if m.trust_remote_code else remote_code_tokenizer(cfg)
    rules.check(custom is None, "model.trust_remote_code", False,
                f"the checkpoint's tokenizer is its own Python code ({custom}, named by "
                "tokenizer_config.json's auto_map): it runs only with model.trust_remote_code=true "
                "(--trust-remote-code), or give model.tokenizer")
    rules.check(m.max_model_len is None or m.max_model_len > 0, "model.max_model_len",
                m.max_model_len, "must be > 0 when set")
    rules.one_of("model.dtype", m.dtype, ("auto", "bfloat16", "float16", "float32"))
    return shape


def _validate_load(cfg: Config, rules: _Rules) -> None:
    rules.one_of("load.dummy", cfg.load.dummy, DUMMY_KINDS)
    rules.one_of("load.format", cfg.load.format, LOAD_FORMATS)
    m = cfg.model
    rules.check(not (m.path is None and m.hf_config and cfg.load.dummy is None), "load.dummy",
                None, "a model given only as hf_config needs load.dummy (empty, zero or xavier): "
                "there is no checkpoint to read")


def _validate_quant(cfg: Config, rules: _Rules) -> None:
    """quant.method against the checkpoint's quantization_config (config.json only)."""
    rules.run(lambda: resolve_scheme(cfg.quant.method, checkpoint_quant_config(cfg),
                                     _reads_gguf(cfg), cfg.load.dummy is not None))


def _reads_gguf(cfg: Config) -> bool:
    m = cfg.model
    return cfg.load.dummy is None and (
        cfg.load.format == "gguf" or (m.path is not None and m.path.endswith(".gguf"))
        or (m.path is None and m.pypi_wheel is not None))


EXECUTORS = ("auto", "uniproc", "multiproc", "ray")


def _validate_parallel(cfg: Config, rules: _Rules,
                       shape: Optional[ArchitectureShape]) -> None:
    p = cfg.parallel
    tp = p.tensor_parallel_size
    rules.check(tp >= 1, "parallel.tensor_parallel_size", tp, "must be >= 1")
    rules.check(p.data_parallel_size >= 1, "parallel.data_parallel_size", p.data_parallel_size,
                "must be >= 1")
    if p.data_parallel_rank is not None:
        rules.check(p.data_parallel_rank >= 0, "parallel.data_parallel_rank",
                    p.data_parallel_rank, "must be >= 0")
        rules.check(p.data_parallel_size == 1, "parallel.data_parallel_rank",
                    p.data_parallel_rank, f"the server numbers its data_parallel_size="
                    f"{p.data_parallel_size} replicas itself: leave it unset")
    rules.check(1 <= p.engine_port <= 65535, "parallel.engine_port", p.engine_port,
                "must be a TCP port")
    rules.one_of("parallel.executor", p.executor, EXECUTORS)
    rules.check(p.executor != "uniproc" or tp == 1, "parallel.executor", p.executor,
                f"uniproc runs one rank: tensor_parallel_size={tp} needs multiproc or auto")
    _validate_hosts(cfg, rules)
    if shape is not None and tp >= 1:
        _validate_shards(cfg, rules, shape)


def _validate_hosts(cfg: Config, rules: _Rules) -> None:
    """nnodes / node_rank / master_* as the environment completes them (atom/config/hosts.py)."""
    p = cfg.parallel
    try:
        h = resolve_hosts(p, os.environ)
    except ConfigError as e:
        rules.errors.extend(e.errors)
        return
    if not rules.check(h.nnodes >= 1, "parallel.nnodes", h.nnodes,
                       "must be >= 1" + h.origin("nnodes")):
        return
    rules.check(0 <= h.node_rank < h.nnodes, "parallel.node_rank", h.node_rank,
                f"must be in [0, nnodes) = [0, {h.nnodes})" + h.origin("node_rank"))
    last_port = h.master_port + (1 + p.tensor_parallel_size if h.multi else 0)
    rules.check(1 <= h.master_port and last_port <= 65535, "parallel.master_port",
                h.master_port, f"must be a TCP port, with the next {last_port - h.master_port} "
                "free for the steps" + h.origin("master_port"))
    rules.check(h.node_rank == 0 or builds_model_engine(cfg), "parallel.node_rank",
                h.node_rank, f"a host other than node 0 runs model ranks: job={cfg.job} "
                f"(engine_source={cfg.server.engine_source}) has none")
    if p.executor == "ray":
        rules.check(not h.multi, "parallel.nnodes", h.nnodes,
                    "must be 1 with executor ray: Ray places the ranks over its cluster's nodes "
                    "itself (ray start on every host, atom on one)" + h.origin("nnodes"))
        rules.check(p.data_parallel_size == 1, "parallel.data_parallel_size",
                    p.data_parallel_size, "replicas are not built over Ray yet: each would "
                    "place its ranks on its own (executor multiproc runs them)")
    if not h.multi:
        return
    tp = p.tensor_parallel_size
    rules.check(tp % h.nnodes == 0, "parallel.nnodes", h.nnodes,
                f"must divide tensor_parallel_size ({tp}): every host runs tp / nnodes ranks"
                + h.origin("nnodes"))
    rules.check(p.executor != "uniproc", "parallel.executor", p.executor,
                "hosts > 1 run through the multiproc executor (auto or multiproc)")


def _validate_shards(cfg: Config, rules: _Rules, shape: ArchitectureShape) -> None:
    """What tensor (and expert) parallelism splits must split evenly; the vocabulary is padded."""
    p = cfg.parallel
    tp = p.tensor_parallel_size
    if not p.enable_dp_attention:  # DP attention keeps every head on every rank
        _validate_head_shards(rules, shape, tp)
    widths = [("the MLP's intermediate size", shape.intermediate_size)]
    if not p.enable_expert_parallel:  # expert parallelism keeps each expert whole
        widths.append(("each expert's intermediate size", shape.moe_intermediate_size))
    for what, width in widths:
        rules.check(width % tp == 0, "parallel.tensor_parallel_size", tp,
                    f"must divide {what} ({width})")
    _validate_expert_parallel(cfg, rules, shape)
    _validate_block_fp8_experts(cfg, rules, shape)


def _validate_head_shards(rules: _Rules, shape: ArchitectureShape, tp: int) -> None:
    """Tensor-parallel attention gives each rank whole heads (a KV head may be replicated)."""
    rules.check(shape.num_attention_heads % tp == 0, "parallel.tensor_parallel_size", tp,
                f"must divide the number of attention heads ({shape.num_attention_heads})")
    kv = shape.num_key_value_heads
    rules.check(kv % tp == 0 or tp % kv == 0, "parallel.tensor_parallel_size", tp,
                f"must divide the number of KV heads ({kv}) or be a multiple of it (each KV "
                f"head then replicated on tp / {kv} ranks)")


def _validate_expert_parallel(cfg: Config, rules: _Rules, shape: ArchitectureShape) -> None:
    """Experts split whole over the tensor-parallel ranks (ep size = tp size); the vocabulary
    needs no rule, as embedding and LM head pad it to a multiple of the ranks."""
    p = cfg.parallel
    if not p.enable_expert_parallel:
        return
    tp, experts = p.tensor_parallel_size, shape.num_experts
    if rules.check(experts > 0, "parallel.enable_expert_parallel", True,
                   f"{shape.architecture} has no routed experts to split"):
        rules.check(experts % tp == 0, "parallel.enable_expert_parallel", True,
                    f"the {experts} routed experts split over tensor_parallel_size={tp} ranks: "
                    "it must divide them")


def _validate_block_fp8_experts(cfg: Config, rules: _Rules, shape: ArchitectureShape) -> None:
    """Block-fp8 experts: each rank's share of an expert's width must be whole 128-wide scale
    blocks (the fused kernel's up rows start on one; R1's 2048 at tp8 is 256)."""
    p, width = cfg.parallel, shape.moe_intermediate_size
    try:
        scheme = resolve_scheme(cfg.quant.method, checkpoint_quant_config(cfg),
                                _reads_gguf(cfg), cfg.load.dummy is not None)
    except ConfigError:  # _validate_quant reports it
        return
    if scheme is None or scheme.block is None or scheme.static_input or width == 0:
        return
    if p.enable_expert_parallel or p.tensor_parallel_size == 1 or width % BLOCK[0]:
        rules.check(width % BLOCK[0] == 0, "model.hf_config.moe_intermediate_size", width,
                    f"block-fp8 experts need a multiple of {BLOCK[0]}")
    else:
        tp = p.tensor_parallel_size
        rules.check(width // tp % BLOCK[0] == 0, "parallel.tensor_parallel_size", tp,
                    f"splits each expert's width ({width}) into {width // tp} columns a rank, "
                    f"not a multiple of the {BLOCK[0]}-wide fp8 scale blocks "
                    "(parallel.enable_expert_parallel=true keeps experts whole)")


def _validate_kv(cfg: Config, rules: _Rules) -> None:
    kv = cfg.kv_cache
    rules.one_of("kv_cache.dtype", kv.dtype, KV_DTYPES)
    rules.check(kv.block_size > 0 and kv.block_size & (kv.block_size - 1) == 0,
                "kv_cache.block_size", kv.block_size, "must be a positive power of two")
    rules.check(0.0 < kv.gpu_memory_utilization <= 1.0, "kv_cache.gpu_memory_utilization",
                kv.gpu_memory_utilization, "must be in (0, 1]")
    rules.check(kv.cpu_cache_bytes > 0, "kv_cache.cpu_cache_bytes", kv.cpu_cache_bytes,
                "must be > 0")
    rules.check(kv.num_blocks is None or kv.num_blocks > 0, "kv_cache.num_blocks",
                kv.num_blocks, "must be > 0 when set")


def _validate_scheduler(cfg: Config, rules: _Rules) -> None:
    s = cfg.scheduler
    rules.check(s.max_num_seqs >= 1, "scheduler.max_num_seqs", s.max_num_seqs, "must be >= 1")
    rules.check(s.max_num_batched_tokens >= cfg.kv_cache.block_size,
                "scheduler.max_num_batched_tokens", s.max_num_batched_tokens,
                f"must be >= kv_cache.block_size ({cfg.kv_cache.block_size})")
    rules.check(s.delay_factor >= 0.0, "scheduler.delay_factor", s.delay_factor, "must be >= 0")
    rules.check(0.0 <= s.reserve_ratio <= 1.0, "scheduler.reserve_ratio", s.reserve_ratio,
                "must be in [0, 1]")


def _validate_runtime(cfg: Config, rules: _Rules) -> None:
    r = cfg.runtime
    rules.one_of("runtime.device", r.device, DEVICES)
    rules.one_of("runtime.kernels", r.kernels, KERNEL_BACKENDS)
    rules.check(0 <= r.level <= 3, "runtime.level", r.level, "compilation level must be in 0..3")
    rules.check(all(b >= 1 for b in r.cudagraph_capture_sizes), "runtime.cudagraph_capture_sizes",
                r.cudagraph_capture_sizes, "every size must be >= 1")
    rules.check(r.throughput_log_interval > 0, "runtime.throughput_log_interval",
                r.throughput_log_interval, "must be > 0")
    if r.kernels == "aiter":
        rules.check(importlib.util.find_spec("aiter") is not None, "runtime.kernels", r.kernels,
                    "aiter backend needs ROCm (the amd-aiter package is not importable here)")


def _validate_specdecode(cfg: Config, rules: _Rules) -> None:
    s = cfg.specdecode
    rules.one_of("specdecode.method", s.method, SPEC_METHODS)
    rules.check(s.num_speculative_tokens >= 1, "specdecode.num_speculative_tokens",
                s.num_speculative_tokens, "must be >= 1")
    if s.method in ("eagle3", "draft_model"):
        rules.check(s.draft_model is not None, "specdecode.draft_model", s.draft_model,
                    f"a draft model is required for method {s.method}")
    rules.check(s.acceptance_length is None or s.acceptance_rate is None,
                "specdecode.acceptance_length", s.acceptance_length,
                "acceptance_length and acceptance_rate are mutually exclusive")
    k = s.num_speculative_tokens
    if s.acceptance_length is not None:
        rules.check(1.0 <= s.acceptance_length <= k + 1, "specdecode.acceptance_length",
                    s.acceptance_length,
                    f"must be in [1, num_speculative_tokens + 1] = [1, {k + 1}]")
    if s.acceptance_rate is not None:
        rules.check(0.0 <= s.acceptance_rate <= 1.0, "specdecode.acceptance_rate",
                    s.acceptance_rate, "must be in [0, 1]")
    if s.method == "ngram":
        rules.check(s.prompt_lookup_min >= 1, "specdecode.prompt_lookup_min",
                    s.prompt_lookup_min, "must be >= 1")
        rules.check(s.prompt_lookup_max >= s.prompt_lookup_min, "specdecode.prompt_lookup_max",
                    s.prompt_lookup_max, f"must be >= prompt_lookup_min ({s.prompt_lookup_min})")


def _validate_server(cfg: Config, rules: _Rules) -> None:
    s = cfg.server
    rules.check(1 <= s.port <= 65535, "server.port", s.port, "must be a TCP port")
    rules.check(s.timeout_keep_alive >= 0, "server.timeout_keep_alive", s.timeout_keep_alive,
                "must be >= 0")
    rules.one_of("server.engine_source", s.engine_source, ENGINE_SOURCES)
    if s.engine_source == "scripted":
        rules.check(s.script_text is not None, "server.script_text", s.script_text,
                    "engine_source=scripted needs the text to replay")


def _validate_format(cfg: Config, rules: _Rules) -> None:
    rules.one_of("format.tool_call_parser", cfg.format.tool_call_parser, TOOL_CALL_PARSERS)
    rules.one_of("format.reasoning_dialect", cfg.format.reasoning_dialect, REASONING_DIALECTS)
    if cfg.format.chat_template is not None:
        rules.check(os.path.exists(cfg.format.chat_template), "format.chat_template",
                    cfg.format.chat_template, "file does not exist")
