"""ModelRunner: prepare → forward → sample, reading and writing the paged KV cache."""
from __future__ import annotations

import itertools
import logging
from typing import Any, Optional

import numpy as np
import torch

from atom.config.schema import Config
from atom.kernels.backend import get_backend, resolve_backend_name
from atom.kernels.metadata import AttentionMetadata
from atom.layers.sampler import PenaltyBatch, SamplingBatch, compute_logprobs, sample
from atom.loader.model_loader import build_model
from atom.model_engine.messages import TokenLogprob
from atom.model_engine.scheduler import ScheduledBatch
from atom.models.hf_config import load_hf_config
from atom.models.llama import head_dim_of
from atom.runner import forward_context
from atom.runner.annotation import annotate
from atom.runner.cuda_graphs import DecodeGraphs, capture_sizes, graphs_enabled
from atom.runner.distributed import tp_size
from atom.runner.forward_context import ForwardContext
from atom.runner.kv_cache import KVLayout, allocate, kv_dtype, num_blocks_for
from atom.runner.profiler import StepProfiler

log = logging.getLogger("atom.runner")

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(cfg: Config) -> torch.device:
    if cfg.runtime.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.runtime.device)


def resolve_dtype(cfg: Config, device: torch.device) -> torch.dtype:
    if cfg.model.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[cfg.model.dtype]


def _eos_ids(hf: Any, tokenizer_eos: Optional[int]) -> set[int]:
    ids: set[int] = set()
    eos = getattr(hf, "eos_token_id", None)
    for v in (eos, tokenizer_eos):
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(int(x) for x in v)
    return ids


class ModelRunner:
    def __init__(self, cfg: Config, eos_token_id: Optional[int] = None) -> None:
        self.cfg = cfg
        self.device = resolve_device(cfg)
        self.dtype = resolve_dtype(cfg, self.device)
        backend_name = resolve_backend_name(cfg.runtime.kernels, self.device)
        forward_context.set_backend(get_backend(backend_name))
        self.backend_name = backend_name
        if self.device.type == "cpu":
            import os

            torch.set_num_threads(cfg.runtime.cpu_threads or max(1, (os.cpu_count() or 2) // 2))
        torch.manual_seed(cfg.runtime.seed)
        self.hf = load_hf_config(cfg)
        self.model = build_model(cfg, self.hf, self.device, self.dtype)
        self.max_model_len = cfg.model.max_model_len or int(self.hf.max_position_embeddings)
        self.eos_token_ids = _eos_ids(self.hf, eos_token_id)
        self.block_size = cfg.kv_cache.block_size
        self.layout = KVLayout(self.hf.num_hidden_layers, self.hf.num_key_value_heads // tp_size(),
                               head_dim_of(self.hf), self.block_size, kv_dtype(cfg, self.dtype))
        self.num_blocks = num_blocks_for(cfg, self.layout, self.device, self._free_kv_bytes())
        self.kv_full, self.kv_caches, self.kv_scales = allocate(self.layout, self.num_blocks, self.device)
        log.info("KV cache: %d blocks x %d tokens = %d tokens (%s, %.2f GiB); kernels=%s",
                 self.num_blocks, self.block_size, self.num_blocks * self.block_size,
                 self.layout.dtype, self.num_blocks * self.layout.bytes_per_block / 2**30, backend_name)
        self.profiler = StepProfiler(cfg.profiler.torch_profiler_dir)
        self.graphs = self._capture_graphs()

    def _capture_graphs(self):
        """Decode CUDA graphs (runtime.cudagraph_capture_sizes) unless enforce_eager/level 0."""
        rt = self.cfg.runtime
        if not graphs_enabled(rt.enforce_eager, rt.level, self.device, self.backend_name):
            return None
        sizes = capture_sizes(rt.cudagraph_capture_sizes, self.cfg.scheduler.max_num_seqs)
        trace = self.cfg.profiler.torch_profiler_dir if self.cfg.profiler.mark_trace else None
        graphs = DecodeGraphs(lambda ids, pos: self.model.compute_logits(self.model(ids, pos)),
                              sizes, -(-self.max_model_len // self.block_size), self.kv_caches,
                              self.kv_scales, self.device, trace_dir=trace)
        secs = graphs.capture()
        log.info("CUDA graphs: captured %d decode sizes (1..%d) in %.1f s; level %d (torch.compile "
                 "not applied: every op is already one fused kernel)", len(sizes), sizes[-1], secs,
                 rt.level)
        return graphs

    # -- memory -----------------------------------------------------------------------------
    def _free_kv_bytes(self) -> Optional[int]:
        """On GPU: what gpu_memory_utilization leaves after weights and a profiling forward."""
        if self.device.type != "cuda" or self.cfg.kv_cache.num_blocks is not None:
            return None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self._profile_forward()
        free, total = torch.cuda.mem_get_info()
        peak = torch.cuda.max_memory_allocated()
        budget = total * self.cfg.kv_cache.gpu_memory_utilization - peak - (total - free
                                                                            - torch.cuda.memory_reserved())
        return max(int(budget), self.layout.bytes_per_block)

    @torch.inference_mode()
    def _profile_forward(self) -> None:
        n = min(self.cfg.scheduler.max_num_batched_tokens, self.max_model_len)
        layout = KVLayout(self.layout.num_layers, self.layout.num_kv_heads, self.layout.head_dim,
                          self.block_size, self.layout.dtype)
        blocks = (n + self.block_size - 1) // self.block_size
        _, caches, scales = allocate(layout, blocks, self.device)
        ids = torch.zeros(n, dtype=torch.long, device=self.device)
        pos = torch.arange(n, device=self.device)
        meta = AttentionMetadata(
            cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32, device=self.device),
            context_lens=torch.tensor([n], dtype=torch.int32, device=self.device),
            block_tables=torch.arange(blocks, dtype=torch.int32, device=self.device).unsqueeze(0),
            slot_mapping=torch.arange(n, device=self.device), max_q_len=n, max_context_len=n,
            is_decode=False, q_lens_cpu=[n], context_lens_cpu=[n])
        with forward_context.forward_context(ForwardContext(meta, caches, scales)):
            hidden = self.model(ids, pos)
            self.model.compute_logits(hidden[-1:])
        del caches
        torch.cuda.synchronize()

    # -- one step ---------------------------------------------------------------------------
    def prepare(self, batch: ScheduledBatch):
        """Host lists → device tensors for one step. Built with numpy: at 256 decoding sequences
        with 2k-token contexts the nested-list torch.tensor of the block tables alone cost more
        than the GPU forward of a small model."""
        bs = self.block_size
        seqs = batch.seqs
        q_lens = list(batch.num_new_tokens)
        starts = [s.num_computed_tokens for s in seqs]
        ctx = [st + n for st, n in zip(starts, q_lens)]
        widths = [len(s.block_table) for s in seqs]
        tables = np.full((len(seqs), max(widths)), -1, dtype=np.int32)
        flat = np.fromiter(itertools.chain.from_iterable(s.block_table for s in seqs),
                           dtype=np.int32, count=sum(widths))
        rows = np.repeat(np.arange(len(seqs)), widths)
        cols = np.arange(flat.size) - np.repeat(np.cumsum(widths) - widths, widths)
        tables[rows, cols] = flat
        cu = np.zeros(len(seqs) + 1, dtype=np.int32)
        np.cumsum(q_lens, out=cu[1:])
        if cu[-1] == len(seqs):  # decode: one token per sequence, fully vectorised
            pos = np.asarray(starts, dtype=np.int64)
            ids = np.fromiter((s.token_ids[st] for s, st in zip(seqs, starts)), dtype=np.int64,
                              count=len(seqs))
            seq_of_tok = np.arange(len(seqs))
        else:
            pos = np.concatenate([np.arange(st, st + n, dtype=np.int64)
                                  for st, n in zip(starts, q_lens)])
            ids = np.fromiter(itertools.chain.from_iterable(
                s.token_ids[st:st + n] for s, st, n in zip(seqs, starts, q_lens)), dtype=np.int64,
                count=int(cu[-1]))
            seq_of_tok = np.repeat(np.arange(len(seqs)), q_lens)
        slots = tables[seq_of_tok, pos // bs].astype(np.int64) * bs + pos % bs
        sample_rows = [i for i in range(len(seqs)) if batch.samples(i)]
        logits_idx = [int(cu[i + 1]) - 1 for i in sample_rows]
        dev = self.device
        meta = AttentionMetadata(
            cu_seqlens_q=torch.from_numpy(cu).to(dev),
            context_lens=torch.tensor(ctx, dtype=torch.int32, device=dev),
            block_tables=torch.from_numpy(tables).to(dev),
            slot_mapping=torch.from_numpy(slots).to(dev),
            max_q_len=max(q_lens), max_context_len=max(ctx), is_decode=max(q_lens) == 1,
            q_lens_cpu=q_lens, context_lens_cpu=ctx)
        return (torch.from_numpy(ids).to(dev), torch.from_numpy(pos).to(dev), meta, sample_rows,
                logits_idx)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                logits_idx: list[int]) -> torch.Tensor:
        b = input_ids.shape[0]
        if meta.is_decode and self.graphs is not None and self.graphs.fits(b):
            logits = self.graphs.replay(input_ids, positions, meta)
            if len(logits_idx) == b:
                return logits
            return logits.index_select(0, torch.tensor(logits_idx, device=self.device))
        with forward_context.forward_context(ForwardContext(meta, self.kv_caches, self.kv_scales)):
            hidden = self.model(input_ids, positions)
            idx = torch.tensor(logits_idx, dtype=torch.long, device=self.device)
            return self.model.compute_logits(hidden.index_select(0, idx))

    def _sampling_batch(self, batch: ScheduledBatch, rows: list[int]) -> SamplingBatch:
        seqs = [batch.seqs[i] for i in rows]
        dev = self.device
        temps = torch.tensor([s.params.temperature for s in seqs], dtype=torch.float32, device=dev)
        vocab = self.hf.vocab_size
        top_ks = [s.params.top_k if s.params.top_k > 0 else vocab for s in seqs]
        top_ps = [s.params.top_p for s in seqs]
        gens = []
        for s in seqs:
            if s.params.seed is not None and s.params.temperature > 0 and s.generator is None:
                s.generator = torch.Generator(device=dev).manual_seed(s.params.seed)
            gens.append(s.generator if s.params.seed is not None else None)
        penalties = self._penalties(seqs) if any(s.params.uses_penalties for s in seqs) else None
        return SamplingBatch(
            temperatures=temps,
            top_ks=torch.tensor(top_ks, device=dev) if any(k < vocab for k in top_ks) else None,
            top_ps=torch.tensor(top_ps, device=dev) if any(p < 1.0 for p in top_ps) else None,
            generators=gens, all_greedy=all(s.params.temperature == 0 for s in seqs),
            penalties=penalties,
            max_logprobs=max((s.params.logprobs for s in seqs if s.params.logprobs is not None),
                             default=-1))

    def _penalties(self, seqs) -> PenaltyBatch:
        dev, vocab = self.device, self.hf.vocab_size
        counts = torch.zeros(len(seqs), vocab, device=dev)
        seen = torch.zeros(len(seqs), vocab, dtype=torch.bool, device=dev)
        for r, s in enumerate(seqs):
            out = torch.tensor(s.output_token_ids, dtype=torch.long, device=dev)
            if out.numel():
                counts[r] = torch.bincount(out, minlength=vocab)[:vocab].float()
            seen[r, torch.tensor(s.token_ids, dtype=torch.long, device=dev)] = True
        f = lambda attr: torch.tensor([getattr(s.params, attr) for s in seqs], device=dev)
        return PenaltyBatch(counts, seen, f("presence_penalty"), f("frequency_penalty"),
                            f("repetition_penalty"))

    def execute(self, batch: ScheduledBatch) -> tuple[dict[int, list[int]], dict[int, TokenLogprob]]:
        """Run one step. Returns (batch index → sampled tokens, batch index → logprob record)."""
        input_ids, positions, meta, rows, logits_idx = self.prepare(batch)
        with annotate(self.profiler.active, meta.q_lens_cpu or [], meta.context_lens_cpu or []):
            return self._execute(batch, input_ids, positions, meta, rows, logits_idx)

    def _execute(self, batch: ScheduledBatch, input_ids: torch.Tensor, positions: torch.Tensor,
                 meta: AttentionMetadata, rows: list[int], logits_idx: list[int]):
        if not rows:
            self.forward(input_ids, positions, meta, [0])
            return {}, {}
        logits = self.forward(input_ids, positions, meta, logits_idx)
        sb = self._sampling_batch(batch, rows)
        tokens = sample(logits, sb)
        token_list = tokens.tolist()
        sampled = {row: [tok] for row, tok in zip(rows, token_list)}
        logprobs: dict[int, TokenLogprob] = {}
        if sb.max_logprobs >= 0:
            chosen, top = compute_logprobs(logits, tokens, sb.max_logprobs)
            for r, row in enumerate(rows):
                k = batch.seqs[row].params.logprobs
                if k is None:
                    continue
                alts = [] if top is None else list(zip(top.indices[r, :k].tolist(),
                                                       top.values[r, :k].tolist()))
                logprobs[row] = TokenLogprob(token_list[r], float(chosen[r]), alts)
        return sampled, logprobs
