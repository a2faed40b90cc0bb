"""Build a model and fill its weights (checkpoint, GGUF or dummy)."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from torch import nn

from atom.config.model_facts import is_gguf
from atom.config.schema import LoadConfig
from atom.kernels.backend import KernelBackend
from atom.layers.model_context import ModelContext
from atom.loader.dummy import fill_dummy
from atom.loader.hf_config import architecture_of
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


def build_model(load: LoadConfig, src: Optional[Path], hf: Any, mc: ModelContext,
                device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The model of `hf`'s architecture, its layers built with `mc`, its weights from `src`
    (the checkpoint directory or GGUF file; unread with load.dummy)."""
    cls = model_class(architecture_of(hf))
    with _default_dtype(dtype), torch.device(device):
        model = cls(hf, mc)
    model.eval()
    if load.dummy is not None:
        fill_dummy(model, load.dummy, load.seed)
        process_after_loading(model)
        return model
    if src is None:
        raise ValueError("a model without load.dummy needs a checkpoint to load")
    if is_gguf(src) or load.format == "gguf":
        from atom.loader.gguf_loader import count_gguf_tensors, iter_gguf

        tensors = iter_with_progress(iter_gguf(src, hf), count_gguf_tensors(src),
                                     load.progress_bar, "loading GGUF")
    else:
        from atom.loader.safetensors_loader import checkpoint_files, count_tensors, iter_safetensors

        files = checkpoint_files(src)
        tensors = iter_with_progress(iter_safetensors(files, weight_skip(model)),
                                     count_tensors(files), load.progress_bar,
                                     "loading safetensors")
    with torch.no_grad():
        loaded = load_named_tensors(model, tensors)
        check_complete(model, loaded)
        prepare_weights(model, mc.backend)
        process_after_loading(model)
    return model


def prepare_weights(model: nn.Module, be: KernelBackend) -> None:
    """Hand weights that arrived quantized to the model's kernel backend: it prepares them for
    its kernels or declines, and then they are dequantized."""
    for module in model.modules():
        prepare = getattr(module, "prepare_weights", None)
        if prepare is not None:
            prepare(be)
    be.weights_prepared()
