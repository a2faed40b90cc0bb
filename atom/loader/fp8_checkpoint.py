"""fp8 safetensors checkpoints: each float8_e4m3fn weight read with its scales as one Fp8Weight.

The scales are tensors of their own beside the weight (`X.weight_scale` or
`X.weight_scale_inv`, and `X.input_scale` for static activations), possibly in another shard
file, so every file's names are indexed first and a weight is yielded once with its scales;
the scale tensors themselves are never yielded, nor the KV-cache scales (kv_scales.py reads
those for the cache). Float tensors (embeddings, norms, the LM head, a checkpoint's unquantized
`ignore` / `exclude_modules` modules) pass through as they are.
"""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

import torch
from safetensors import safe_open

from atom.config.quant import Fp8Scheme
from atom.kernels.fp8_weight import E4M3, Fp8Weight, from_checkpoint
from atom.loader.kv_scales import is_kv_scale
from atom.loader.weights import is_expert_weight

SCALE_SUFFIXES = (".weight_scale", ".weight_scale_inv", ".input_scale")


def _is_scale(name: str) -> bool:
    return name.endswith(SCALE_SUFFIXES) or is_kv_scale(name)


def count_fp8_tensors(files: list[Path]) -> int:
    n = 0
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            n += sum(not _is_scale(k) for k in h.keys())
    return n


def experts_are_fp8(files: list[Path]) -> bool:
    """Whether the checkpoint's routed experts are e4m3 (its first expert matrix's dtype, from
    the header: nothing is read). DeepSeek-V3/R1's and Qwen3's fp8 releases quantize them."""
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for name in h.keys():
                if is_expert_weight(name):
                    return h.get_slice(name).get_dtype() == "F8_E4M3"
    return False


def _fp8_weight(base: str, weight: torch.Tensor, where: dict[str, Any],
                scheme: Fp8Scheme) -> Fp8Weight:
    scale_name = base + (".weight_scale_inv" if scheme.block else ".weight_scale")
    if scale_name not in where:
        raise ValueError(f"fp8 weight {base}.weight has no {scale_name} in the checkpoint")
    input_scale = None
    if scheme.static_input:
        if base + ".input_scale" not in where:
            raise ValueError(f"fp8 weight {base}.weight has no {base}.input_scale, which "
                             "static activations need")
        input_scale = where[base + ".input_scale"].get_tensor(base + ".input_scale")
    return from_checkpoint(weight, where[scale_name].get_tensor(scale_name), input_scale,
                           scheme.block is not None)


def iter_fp8_safetensors(files: list[Path], scheme: Fp8Scheme,
                         skip: Optional[Callable[[str], bool]] = None
                         ) -> Iterator[tuple[str, Union[torch.Tensor, Fp8Weight]]]:
    """Every tensor but the scales and those `skip` names, fp8 weights as Fp8Weight, in the
    files' order."""
    with ExitStack() as stack:
        handles = [stack.enter_context(safe_open(str(f), framework="pt")) for f in files]
        where = {name: h for h in handles for name in h.keys()}
        for name, h in where.items():
            if _is_scale(name) or (skip is not None and skip(name)):
                continue
            t = h.get_tensor(name)
            if t.dtype == E4M3 and name.endswith(".weight"):
                yield name, _fp8_weight(name[:-len(".weight")], t, where, scheme)
            else:
                yield name, t
