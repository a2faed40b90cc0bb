"""Build a model and fill its weights (checkpoint, GGUF or dummy)."""
from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from torch import nn

from atom.config.model_facts import is_gguf
from atom.config.quant import Fp8Scheme, fp8_capability_problem, quant_config_of, resolve_scheme
from atom.config.schema import LoadConfig
from atom.kernels.backend import KernelBackend
from atom.kernels.fp8_weight import quantize as quantize_fp8
from atom.layers.model_context import ModelContext
from atom.loader.dummy import fill_dummy
from atom.loader.hf_config import architecture_of
from atom.loader.safetensors_loader import checkpoint_files, count_tensors, iter_safetensors
from atom.loader.fp8_checkpoint import count_fp8_tensors, experts_are_fp8, iter_fp8_safetensors
from atom.loader.fp8_online import quantize_dummy
from atom.loader.kv_scales import checkpoint_kv_scales
from atom.loader.gguf_loader import count_gguf_tensors, iter_gguf
from atom.loader.weights import (check_complete, iter_with_progress, load_named_tensors,
                                 process_after_loading, weight_skip)
from atom.models.registry import model_class

log = logging.getLogger("atom.loader")


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(prev)


def _gguf(load: LoadConfig, src: Optional[Path]) -> bool:
    return src is not None and (is_gguf(src) or load.format == "gguf")


def _quant_config(hf: Any, src: Optional[Path]) -> Optional[dict]:
    """config.json's quantization_config, or ModelOpt's hf_quant_config.json beside it."""
    return quant_config_of(getattr(hf, "quantization_config", None),
                           src if src is not None and src.is_dir() else None)


def fp8_scheme(method: str, load: LoadConfig, src: Optional[Path], hf: Any, device: torch.device,
               kernels: str) -> Optional[Fp8Scheme]:
    """The run's fp8 scheme (validation checked the config; this also knows the GPU), raised
    as a ConfigError before any weight is read."""
    scheme = resolve_scheme(method, _quant_config(hf, src), _gguf(load, src),
                            load.dummy is not None)
    if scheme is not None and device.type == "cuda":
        problem = fp8_capability_problem(torch.cuda.get_device_capability(device), kernels)
        if problem is not None:
            raise problem
    return scheme


def build_model(load: LoadConfig, src: Optional[Path], hf: Any, mc: ModelContext,
                device: torch.device, dtype: torch.dtype, quant_method: str = "auto",
                mtp: bool = False, cls: Optional[type] = None) -> nn.Module:
    """The model of `hf`'s architecture, its layers built with `mc`, its weights from `src`
    (the checkpoint directory or GGUF file; unread with load.dummy), quantized as
    `quant_method` (quant.method) says. `mtp` (specdecode=mtp): its next-n layer too, built
    before the weights load so they load with the rest. `cls`: a class that is no target
    architecture (an EAGLE-3 head) instead of the registry's."""
    cls = cls or model_class(architecture_of(hf))
    scheme = fp8_scheme(quant_method, load, src, hf, device, mc.backend.name)
    files = (None if src is None or _gguf(load, src) or load.dummy is not None
             else checkpoint_files(src))
    mc = replace(mc, fp8_experts=fp8_experts(scheme, files))
    with _default_dtype(dtype), torch.device(device):
        model = cls(hf, mc)
        if mtp:  # validation admits only models that have next-n layers
            model.add_mtp()
    model.eval()
    if load.dummy is not None:
        fill_dummy(model, load.dummy, load.seed)
        with torch.no_grad():
            if scheme is not None:
                quantize_dummy(model, block=scheme.block is not None)
                prepare_weights(model, mc.backend)
            process_after_loading(model)
        return model
    if src is None:
        raise ValueError("a model without load.dummy needs a checkpoint to load")
    quantize = None
    if scheme is not None and scheme.online:
        quantize = functools.partial(quantize_fp8, block=scheme.block is not None)
    if files is None:
        tensors = iter_with_progress(iter_gguf(src, hf), count_gguf_tensors(src),
                                     load.progress_bar, "loading GGUF")
    else:
        skip = weight_skip(model)
        if scheme is not None and not scheme.online:
            items, total = iter_fp8_safetensors(files, scheme, skip), count_fp8_tensors(files)
        else:
            items, total = iter_safetensors(files, skip), count_tensors(files)
        tensors = iter_with_progress(items, total, load.progress_bar, "loading safetensors")
        rename = getattr(model, "checkpoint_name", None)
        if rename is not None:
            tensors = ((rename(name), t) for name, t in tensors)
    with torch.no_grad():
        loaded = load_named_tensors(model, tensors, quantize)
        check_complete(model, loaded)
        prepare_weights(model, mc.backend)
        process_after_loading(model)
    return model


def kv_cache_scales(load: LoadConfig, src: Optional[Path], hf: Any, quant_method: str,
                    num_layers: int) -> dict[int, tuple[float, float]]:
    """The fp8 checkpoint's (k_scale, v_scale) per attention layer (kv_scales.py); none for
    dummy weights, a GGUF or float weights, whose caches are scaled by 1.0."""
    if src is None or load.dummy is not None or _gguf(load, src):
        return {}
    scheme = resolve_scheme(quant_method, _quant_config(hf, src), False, False)
    if scheme is None or scheme.online:
        return {}
    return checkpoint_kv_scales(checkpoint_files(src), scheme.kv_scales, num_layers)


def fp8_experts(scheme: Optional[Fp8Scheme], files: Optional[list[Path]]) -> Optional[str]:
    """How the routed experts are held (ModelContext.fp8_experts): in fp8 when the run
    quantizes online or with dummy weights, or when the checkpoint's experts are e4m3 (`files`;
    None: no checkpoint is read); in the model dtype when the checkpoint scales activations
    statically (the fused kernel scales them per token), or has no fp8 at all."""
    if scheme is None or scheme.static_input:
        return None
    if files is not None and not scheme.online:
        if not experts_are_fp8(files):
            return None
    return "block" if scheme.block is not None else "channel"


def prepare_weights(model: nn.Module, be: KernelBackend) -> None:
    """Hand weights that arrived quantized to the model's kernel backend: it prepares them for
    its kernels or declines, and then they are dequantized."""
    for module in model.modules():
        prepare = getattr(module, "prepare_weights", None)
        if prepare is not None:
            prepare(be)
    be.weights_prepared()
