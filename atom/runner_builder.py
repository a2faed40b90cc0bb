"""The builder's engine side: one rank's ModelRunner assembled from a Config.

Every piece is made here and handed to the next: the ranks (ParallelState), the kernel backend,
the model built with both, its forward (compiled or not), the KV cache sized from the model's
layers and the memory left, the runner over all of them, then the CUDA graphs of its steps (the
target's decode and verify steps, a drafter's catch-up and draft depths) over that cache, handed
to the runner and its drafter. One function for every rank: the in-process executor calls it,
and each worker process of a multi-process executor is handed it (it joins its group first, so
the ranks come from there).
"""
from __future__ import annotations

import logging
from typing import Any, Optional

import torch

from atom.config.schema import Config
from atom.kernels.backend import get_backend, resolve_backend_name
from atom.layers.forward_context import ForwardSlot
from atom.layers.kv_spec import MLASpec
from atom.layers.mla import ABSORBED_MAX_Q
from atom.layers.model_context import ModelContext
from atom.layers.moe import held_experts
from atom.layers.parallel_state import ParallelState
from atom.loader.model_loader import build_model, kv_cache_scales
from atom.models.eagle3 import Eagle3Draft
from atom.loader.hf_config import load_hf_config, model_source
from atom.runner.compile import ForwardFn, compile_forward, describe_level
from atom.runner.cpu_threads import cpu_threads
from atom.runner.cuda_graphs import (GraphFn, StepGraphs, capture_sizes, graphs_enabled,
                                     multi_token_sizes, plan_graphs)
from atom.runner.device import resolve_device, resolve_dtype
from atom.runner.dp_attention_runner import DPAttentionRunner
from atom.runner.host_staging import HostStager
from atom.runner.kv_cache import (KVCache, KVCacheSpec, allocate, describe_kv_dtype, kv_dtype,
                                  layer_scales, model_kv_spec, num_blocks_for)
from atom.runner.launched_step import accept_drafts
from atom.runner.memory_profile import kv_budget_bytes
from atom.runner.model_runner import ModelRunner
from atom.runner.profiler import StepProfiler
from atom.spec_decode.acceptance import build_verifier
from atom.spec_decode.draft_model_drafter import DraftModelDrafter, draft_model_config
from atom.spec_decode.drafter import CATCH_UP, DECODE, Drafter
from atom.spec_decode.eagle3_drafter import AuxCapture, Eagle3Drafter
from atom.spec_decode.mtp_drafter import MTPDrafter

log = logging.getLogger("atom.runner")


def build_runner(cfg: Config, hf: Any, parallel: ParallelState) -> ModelRunner:
    """The runner of `hf`'s model under `cfg`, sharded over `parallel`'s ranks (the worker's,
    built once by whoever runs this). Sets what is the process's own: CPU threads and the torch
    seed."""
    device = resolve_device(cfg)
    dtype = resolve_dtype(cfg, device)
    backend_name = resolve_backend_name(cfg.runtime.kernels, device)
    if device.type == "cpu":
        torch.set_num_threads(cpu_threads(cfg.runtime.cpu_threads, serving=False))
    torch.manual_seed(cfg.runtime.seed)
    mc = ModelContext(get_backend(backend_name), parallel,
                      dp_attention=cfg.parallel.enable_dp_attention)
    src = model_source(cfg) if cfg.load.dummy is None else None
    model = build_model(cfg.load, src, hf, mc, device, dtype, cfg.quant.method,
                        mtp=cfg.specdecode.method == "mtp")
    if parallel.ep_size > 1:
        log.info("expert parallel rank %d of %d: %s", parallel.ep_rank, parallel.ep_size,
                 held_experts(model))
    if mc.dp_attention:
        log.info("DP attention rank %d of %d: attention, embedding and LM head whole over this "
                 "rank's sequences, the MLPs over every rank's rows", parallel.tp_rank,
                 parallel.tp_size)
    forward_fn = compile_forward(model, cfg.runtime, device, backend_name)
    graphs_on = graphs_enabled(cfg.runtime.enforce_eager, cfg.runtime.level, device, backend_name)
    log.info("%s", describe_level(cfg.runtime, device, backend_name, graphs_on))
    max_model_len = cfg.model.max_model_len or int(hf.max_position_embeddings)
    spec = model_kv_spec(model, kv_dtype(cfg.kv_cache, dtype), cfg.kv_cache.block_size)
    draft = (_draft_model(cfg, mc, device, dtype)
             if cfg.specdecode.method in ("draft_model", "eagle3") else None)
    draft_spec = (model_kv_spec(draft, spec.dtype, spec.block_size) if draft is not None
                  else None)
    aux = (AuxCapture(model, draft) if draft is not None and cfg.specdecode.method == "eagle3"
           else None)
    scales = layer_scales(cfg.kv_cache, spec.num_layers,
                          kv_cache_scales(cfg.load, src, hf, cfg.quant.method, spec.num_layers))
    kv = _kv_cache(cfg, spec, device, mc.forward, model, forward_fn, max_model_len, scales,
                   draft_spec)
    log.info("KV cache: %d blocks x %d tokens = %d tokens, %.2f GiB, %s; kernels=%s",
             kv.num_blocks, spec.block_size, kv.num_blocks * spec.block_size,
             kv.num_blocks * spec.bytes_per_block / 2**30,
             describe_kv_dtype(cfg.kv_cache, spec.dtype), backend_name)
    drafter = _drafter(cfg, model, kv, max_model_len, draft, draft_spec, aux, device, dtype)
    # DP attention: each rank runs its own rows (dp_attention_runner.py)
    dp = {"ranks": parallel} if mc.dp_attention else {}
    runner = (DPAttentionRunner if dp else ModelRunner)(
        model, forward_fn, mc.forward, kv, device=device,
        max_model_len=max_model_len, vocab_size=int(hf.vocab_size),
        verify=build_verifier(cfg.specdecode, cfg.runtime.seed, accept_drafts),
        profiler=StepProfiler(cfg.profiler.torch_profiler_dir, mc.parallel.tp_rank,
                              cfg.parallel.data_parallel_rank),
        drafter=drafter, **dp)
    if graphs_on:
        _capture(step_graphs(cfg, runner, draft_spec, mc.parallel.tp_rank))
    return runner


def _draft_model(cfg: Config, mc: ModelContext, device: torch.device,
                 dtype: torch.dtype) -> torch.nn.Module:
    """specdecode=draft_model's model or eagle3's head, with its own ModelContext (its forward
    slot) on the target's backend and ranks; loaded before the KV cache is sized, so its
    weights count as used memory there."""
    dcfg = draft_model_config(cfg)
    dmc = ModelContext(mc.backend, mc.parallel)
    cls = Eagle3Draft if cfg.specdecode.method == "eagle3" else None
    return build_model(dcfg.load, model_source(dcfg), load_hf_config(dcfg), dmc, device, dtype,
                       cfg.quant.method, cls=cls)


def _drafter(cfg: Config, model: torch.nn.Module, kv: KVCache, max_model_len: int,
             draft: Optional[torch.nn.Module], draft_spec: Optional[KVCacheSpec],
             aux: Optional[AuxCapture], device: torch.device,
             dtype: torch.dtype) -> Optional[Drafter]:
    """The runner-side drafter a method needs; None for core-side proposers (n-gram) and none.
    A draft model's or EAGLE-3 head's pool: the target's block count over its layers."""
    k, bs = cfg.specdecode.num_speculative_tokens, cfg.kv_cache.block_size
    stager = HostStager(device)
    if cfg.specdecode.method == "mtp":
        return MTPDrafter(model, k, bs, max_model_len, kv.caches, kv.scales, dtype, stager)
    if draft is None or draft_spec is None:
        return None
    _, caches, scales = allocate(draft_spec, kv.num_blocks, device)
    log.info("draft KV cache: %d blocks, %.2f GiB", kv.num_blocks,
             kv.num_blocks * draft_spec.bytes_per_block / 2**30)
    if aux is not None:
        return Eagle3Drafter(model, draft, aux, k, bs, max_model_len, caches, scales, dtype,
                             stager)
    return DraftModelDrafter(draft, k, bs, max_model_len, caches, scales,
                             int(model.hf_config.vocab_size), stager)


def _kv_cache(cfg: Config, spec: KVCacheSpec, device: torch.device, slot: ForwardSlot,
              model: torch.nn.Module, forward_fn: ForwardFn, max_model_len: int,
              scales: list[tuple[float, float]],
              draft_spec: Optional[KVCacheSpec] = None) -> KVCache:
    """kv_cache.num_blocks, or on a GPU what gpu_memory_utilization leaves after the weights
    and a profiling forward, allocated. With a draft model the budget is shared: each block
    costs the target's bytes and the draft's (its pool, allocated by _drafter, has the same
    block count); the profile is the target's forward, the larger of the two."""
    free: Optional[int] = None
    if device.type == "cuda" and cfg.kv_cache.num_blocks is None:
        tokens = min(cfg.scheduler.max_num_batched_tokens, max_model_len)
        step = lambda ids, pos: model.compute_logits(forward_fn(ids, pos)[-1:])
        free = kv_budget_bytes(step, slot, spec, tokens, cfg.kv_cache.gpu_memory_utilization,
                               device)
    sizing = (spec if draft_spec is None
              else KVCacheSpec(spec.layers + draft_spec.layers, spec.block_size))
    blocks = num_blocks_for(cfg.kv_cache, sizing, device, free, max_model_len)
    return KVCache(spec, blocks, *allocate(spec, blocks, device, scales))


def _max_captured_q(spec: KVCacheSpec) -> Optional[int]:
    """The longest query per sequence a model's forward can be captured with: MLA layers take
    their absorbed path (device lengths only) up to ABSORBED_MAX_Q queries."""
    return ABSORBED_MAX_Q if any(isinstance(s, MLASpec) for s in spec.layers) else None


def step_graphs(cfg: Config, runner: ModelRunner, draft_spec: Optional[KVCacheSpec],
                rank: int) -> list[StepGraphs]:
    """The target's decode and verify graphs over runtime.cudagraph_capture_sizes (handed to
    the runner) and a runner-side drafter's (handed to it), not yet captured; with
    --mark-trace, one trace file per forward, size and rank. draft_spec: a draft model's or
    EAGLE-3 head's KV spec (None: the drafter is a layer of the target)."""
    drafter, kv = runner.drafter, runner.kv
    k = cfg.specdecode.num_speculative_tokens if cfg.specdecode.method else 0
    target_cap, drafter_cap = _max_captured_q(kv.spec), _max_captured_q(draft_spec or kv.spec)
    plan = plan_graphs(k, drafter is not None, target_cap, drafter_cap)
    sizes = capture_sizes(cfg.runtime.cudagraph_capture_sizes, cfg.scheduler.max_num_seqs)
    trace = cfg.profiler.torch_profiler_dir if cfg.profiler.mark_trace else None
    blocks = -(-runner.max_model_len // kv.spec.block_size)

    def graphs(fn: GraphFn, q: int, slot: ForwardSlot, caches: list, scales: list,
               ragged: bool, inputs: tuple = (), name: str = "") -> Optional[StepGraphs]:
        reach = multi_token_sizes(sizes, q, cfg.scheduler.max_num_batched_tokens)
        return (StepGraphs(fn, reach, q, blocks, slot, caches, scales, runner.device, inputs,
                           name, ragged, trace_dir=trace, rank=rank) if reach else None)

    model, forward_fn = runner.model, runner.forward_fn
    if drafter is None:
        target_fn: GraphFn = lambda ids, pos: (model.compute_logits(forward_fn(ids, pos)),)
    else:
        target_fn = drafter.target_forward(forward_fn)
    # GQA layers take steps of fewer queries in a graph of more (cuda_graphs.py): MLA's do not.
    target = {q: graphs(target_fn, q, runner.slot, kv.caches, kv.scales, target_cap is None)
              for q in plan.target}
    every = [g for g in target.values() if g is not None]
    runner.use_graphs(target[1], [g for g in every if g.q_len > 1])
    if drafter is not None:
        for name, qs in ((CATCH_UP, plan.catch_up), (DECODE, plan.decode)):
            f = drafter.forwards[name]
            mine = [g for g in (graphs(f.fn, q, drafter.slot, drafter.kv_caches,
                                       drafter.kv_scales, drafter_cap is None, f.inputs,
                                       f"draft_{name}")
                                for q in qs) if g is not None]
            drafter.use_graphs(name, mine)
            every += mine
    return every


def _capture(every: list[StepGraphs]) -> None:
    """Every forward's graphs into one memory pool, the largest first (the rest reuse its
    blocks)."""
    pool = None
    for g in sorted(every, key=lambda g: -g.max_bs * g.q_len):
        secs, pool = g.capture(pool)
        log.info("CUDA graphs: captured %d sizes (1..%d) of %s, %d token(s) a sequence, in "
                 "%.1f s", len(g.sizes), g.max_bs, g.name or "the target", g.q_len, secs)
