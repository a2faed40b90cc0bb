"""Put checkpoint tensors into a model: HF names → packed parameters via each one's weight_loader."""
from __future__ import annotations

import logging
import re
from typing import Callable, Iterable, Iterator, Optional

import torch
from torch import nn

from atom.kernels.fp8_weight import Fp8Weight
from atom.loader.fp8_online import fp8_linear_weights
from atom.kernels.quantized_weight import QUANTIZED, Quantized

log = logging.getLogger("atom.loader")

_EXPERT = re.compile(r"\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$")
# Mixtral-style expert names (MiniMax-M2's checkpoints): w1 the gate, w3 the up, w2 the down.
_EXPERT_PART = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down",
                "w1": "gate", "w3": "up", "w2": "down"}
_FUSED_EXPERT = re.compile(r"\.experts\.(gate_up_proj|down_proj)$")


def is_expert_weight(name: str) -> bool:
    """A routed expert's matrix, per expert or fused over experts."""
    return _EXPERT.search(name) is not None or _FUSED_EXPERT.search(name) is not None


def _route(name: str, mapping: dict) -> tuple[str, object]:
    """(parameter name, shard id) for a checkpoint tensor name."""
    m = _EXPERT.search(name)
    if m:
        e, which = int(m.group(1)), _EXPERT_PART[m.group(2)]
        param = name[: m.start()] + (".experts.w2" if which == "down" else ".experts.w13")
        return param, (e, which)
    m = _FUSED_EXPERT.search(name)
    if m:
        which = "gate_up" if m.group(1) == "gate_up_proj" else "down"
        return name[: m.start()] + (".experts.w13" if which == "gate_up" else ".experts.w2"), ("all", which)
    for src, (dst, shard) in mapping.items():
        token = f".{src}."
        if token in name:
            return name.replace(token, f".{dst}."), shard
    return name, None


def weight_skip(model: nn.Module) -> Callable[[str], bool]:
    """The checkpoint names never read from disk: those the model's own `skip_weight` names
    (DeepSeek-R1's MTP layer) and the per-expert tensors of experts another rank holds (expert
    parallelism: at ep8 seven eighths of R1's routed-expert bytes)."""
    own = getattr(model, "skip_weight", None)
    params = dict(model.named_parameters())
    mapping = getattr(model, "packed_modules_mapping", {})

    def skip(name: str) -> bool:
        if own is not None and own(name):
            return True
        if _EXPERT.search(name) is None:
            return False
        pname, (expert, _) = _route(name, mapping)
        holds = getattr(params.get(pname), "holds_expert", None)
        return holds is not None and not holds(expert)
    return skip


def load_named_tensors(model: nn.Module, tensors: Iterable[tuple[str, torch.Tensor | Quantized]],
                       quantize: Optional[Callable[[torch.Tensor], Fp8Weight]] = None
                       ) -> set[str]:
    """Load every tensor; return the names of parameters that received data. A quantized weight
    goes to the parameter's weight_loader as it is (the layer keeps it for the backend) or,
    where the parameter has no loader that takes one, in float. An Fp8Weight is taken by linear
    layers (fp8_linear_weights), moving to the parameter's device first, and by fp8 experts
    (FusedMoE), which also take float parts to quantize themselves. `quantize` (online fp8)
    turns the linears' float weights into Fp8Weights, on the device (a GGUF's blocks
    dequantized first)."""
    params = dict(model.named_parameters())
    fp8_params = fp8_linear_weights(model)
    mapping = getattr(model, "packed_modules_mapping", {})
    tied = bool(getattr(getattr(model, "hf_config", None), "tie_word_embeddings", False))
    loaded: set[str] = set()
    for name, tensor in tensors:
        if "rotary_emb.inv_freq" in name:
            continue
        if tied and name == "lm_head.weight":
            continue
        pname, shard = _route(name, mapping)
        param = params.get(pname)
        if param is None:
            raise KeyError(f"checkpoint tensor {name!r} has no place in the model (looked for {pname!r})")
        loader = getattr(param, "weight_loader", None)
        if getattr(param, "fp8_experts", False):
            pass  # FusedMoE keeps fp8 parts as read and quantizes float ones, expert by expert
        elif isinstance(tensor, Fp8Weight):
            tensor = (tensor.to(param.device) if pname in fp8_params
                      else tensor.dequantize(param.dtype))
        elif quantize is not None and pname in fp8_params:  # GGUF blocks: their float values
            dense = tensor.dequantize(param.dtype) if isinstance(tensor, QUANTIZED) else tensor
            tensor = quantize(dense.to(param.device, param.dtype))
        elif isinstance(tensor, QUANTIZED):
            if not getattr(param, "takes_quantized", False):
                tensor = tensor.dequantize(param.dtype)
        else:
            tensor = tensor.to(param.dtype)
        if loader is None:
            param.data.copy_(tensor)
        elif shard is None:
            loader(param, tensor)
        else:
            loader(param, tensor, shard)
        loaded.add(pname)
    return loaded


def process_after_loading(model: nn.Module) -> None:
    """Lets each module derive what it computes from its loaded weights once, before the first
    forward (MLA's absorbed W_UK/W_UV), whichever way the weights came (checkpoint or dummy)."""
    for m in model.modules():
        hook = getattr(m, "process_weights_after_loading", None)
        if hook is not None:
            hook()


def check_complete(model: nn.Module, loaded: set[str]) -> None:
    missing = [n for n, _ in model.named_parameters() if n not in loaded]
    tied = getattr(getattr(model, "hf_config", None), "tie_word_embeddings", False)
    missing = [n for n in missing if not (tied and n == "lm_head.weight")]
    if missing:
        raise ValueError(f"checkpoint is missing {len(missing)} tensors, e.g. {missing[:5]}")


def iter_with_progress(items: Iterator, total: int, enabled: bool, desc: str) -> Iterator:
    from tqdm import tqdm

    yield from tqdm(items, total=total, desc=desc, disable=not enabled, leave=False)
