"""Build the model for a Config and fill its weights (checkpoint, GGUF or dummy)."""
from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
from torch import nn

from atom.config.quant import Fp8Scheme, fp8_capability_problem, resolve_scheme
from atom.config.schema import Config
from atom.kernels.fp8_weight import quantize as quantize_fp8
from atom.loader.dummy import fill_dummy
from atom.loader.fp8_online import quantize_dummy
from atom.loader.weights import (check_complete, iter_with_progress, load_named_tensors,
                                 process_after_loading)
from atom.models.hf_config import architecture_of, is_gguf, model_source
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


def fp8_scheme(cfg: Config, hf: Any, device: torch.device) -> Optional[Fp8Scheme]:
    """The run's fp8 scheme (validation checked the config; this also knows the GPU), raised
    as a ConfigError before any weight is read."""
    from atom.layers.forward_context import backend

    src = model_source(cfg) if cfg.load.dummy is None else None
    gguf = src is not None and (is_gguf(src) or cfg.load.format == "gguf")
    scheme = resolve_scheme(cfg.quant.method, getattr(hf, "quantization_config", None), gguf,
                            cfg.load.dummy is not None)
    if scheme is not None and device.type == "cuda":
        problem = fp8_capability_problem(torch.cuda.get_device_capability(device),
                                         backend().name)
        if problem is not None:
            raise problem
    return scheme


def build_model(cfg: Config, hf: Any, device: torch.device, dtype: torch.dtype) -> nn.Module:
    cls = model_class(architecture_of(hf))
    scheme = fp8_scheme(cfg, hf, device)
    with _default_dtype(dtype), torch.device(device):
        model = cls(hf)
    model.eval()
    if cfg.load.dummy is not None:
        fill_dummy(model, cfg.load.dummy, cfg.load.seed)
        with torch.no_grad():
            if scheme is not None:
                quantize_dummy(model, block=scheme.block is not None)
                prepare_weights(model)
            process_after_loading(model)
        return model
    src = model_source(cfg)
    assert src is not None
    quantize = None
    if scheme is not None and scheme.online:
        quantize = functools.partial(quantize_fp8, block=scheme.block is not None)
    if is_gguf(src) or cfg.load.format == "gguf":
        from atom.loader.gguf_loader import count_gguf_tensors, iter_gguf

        tensors = iter_with_progress(iter_gguf(src, hf), count_gguf_tensors(src),
                                     cfg.load.progress_bar, "loading GGUF")
    else:
        from atom.loader.safetensors_loader import checkpoint_files, count_tensors, iter_safetensors

        files = checkpoint_files(src)
        skip = getattr(model, "skip_weight", None)
        if scheme is not None and not scheme.online:
            from atom.loader.fp8_checkpoint import count_fp8_tensors, iter_fp8_safetensors

            items, total = iter_fp8_safetensors(files, scheme, skip), count_fp8_tensors(files)
        else:
            items, total = iter_safetensors(files, skip), count_tensors(files)
        tensors = iter_with_progress(items, total, cfg.load.progress_bar, "loading safetensors")
    with torch.no_grad():
        loaded = load_named_tensors(model, tensors, quantize)
        check_complete(model, loaded)
        prepare_weights(model)
        process_after_loading(model)
    return model


def prepare_weights(model: nn.Module) -> None:
    """Hand weights that arrived quantized to the kernel backend (forward_context's, which the
    runner sets before building the model): it prepares them for its kernels or declines, and
    then they are dequantized."""
    from atom.layers.forward_context import backend

    be = backend()
    for module in model.modules():
        prepare = getattr(module, "prepare_weights", None)
        if prepare is not None:
            prepare(be)
    be.weights_prepared()
