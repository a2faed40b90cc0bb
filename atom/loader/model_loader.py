"""Build the model for a Config and fill its weights (checkpoint, GGUF or dummy)."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from atom.config.schema import Config
from atom.loader.dummy import fill_dummy
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


def build_model(cfg: Config, hf: Any, device: torch.device, dtype: torch.dtype) -> nn.Module:
    cls = model_class(architecture_of(hf))
    with _default_dtype(dtype), torch.device(device):
        model = cls(hf)
        if cfg.specdecode.method == "mtp":  # validation admits only models that have next-n layers
            model.add_mtp()
    model.eval()
    if cfg.load.dummy is not None:
        fill_dummy(model, cfg.load.dummy, cfg.load.seed)
        process_after_loading(model)
        return model
    src = model_source(cfg)
    assert src is not None
    if is_gguf(src) or cfg.load.format == "gguf":
        from atom.loader.gguf_loader import count_gguf_tensors, iter_gguf

        tensors = iter_with_progress(iter_gguf(src, hf), count_gguf_tensors(src),
                                     cfg.load.progress_bar, "loading GGUF")
    else:
        from atom.loader.safetensors_loader import checkpoint_files, count_tensors, iter_safetensors

        files = checkpoint_files(src)
        skip = getattr(model, "skip_weight", None)
        tensors = iter_with_progress(iter_safetensors(files, skip), count_tensors(files),
                                     cfg.load.progress_bar, "loading safetensors")
        rename = getattr(model, "checkpoint_name", None)
        if rename is not None:
            tensors = ((rename(name), t) for name, t in tensors)
    with torch.no_grad():
        loaded = load_named_tensors(model, tensors)
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
