"""GGUF checkpoints: quantized matrices stay quantized (QuantizedWeight, gguf_blocks.py) for the
kernel backend to prepare or dequantize; float tensors and formats without a decoder there are
dequantized to float32 with the `gguf` package.

llama.cpp stores tensors under its own names and, for llama-family attention, with the rows of
q and k permuted for its interleaved rotary; both are undone here so the model sees HF weights.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Union

import numpy as np
import torch

from atom.kernels.quantized_weight import QuantizedWeight
from atom.loader.gguf_blocks import decode, keeps_quantized
from atom.loader.gguf_file import architecture, reader

_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "ffn_gate_inp": "mlp.gate",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_BLOCK = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
_PERMUTED_ARCHS = {"llama"}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK.match(gguf_name)
    if not m or m.group(2) not in _LAYER_NAMES:
        raise KeyError(f"GGUF tensor {gguf_name!r} has no HF name mapping")
    return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"


Weight = Union[torch.Tensor, QuantizedWeight]


def _unpermute(w: Weight, n_head: int) -> Weight:
    """Inverse of llama.cpp's q/k row permutation (interleaved → halves rotary layout)."""
    rows = w.shape[0]
    order = torch.arange(rows).reshape(n_head, rows // n_head // 2, 2).transpose(1, 2).reshape(-1)
    return w.permute_rows(order) if isinstance(w, QuantizedWeight) else w[order]


def _read(t: Any) -> Weight:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    shape = tuple(int(s) for s in reversed(t.shape))  # GGUF lists dims innermost first
    if len(shape) == 2 and keeps_quantized(t.tensor_type):
        return decode(t.data, t.tensor_type, shape)  # type: ignore[arg-type]
    if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        arr = np.asarray(t.data)
    else:
        arr = dequantize(t.data, t.tensor_type)
    return torch.from_numpy(np.array(arr, dtype=np.float32).reshape(shape))


def iter_gguf(path: Path, hf_config: Any) -> Iterator[tuple[str, Weight]]:
    r = reader(str(path))
    arch = architecture(r)
    permuted = arch in _PERMUTED_ARCHS
    for t in r.tensors:
        name = hf_name(t.name)
        w = _read(t)
        if permuted and name.endswith("q_proj.weight"):
            w = _unpermute(w, hf_config.num_attention_heads)
        elif permuted and name.endswith("k_proj.weight"):
            w = _unpermute(w, hf_config.num_key_value_heads)
        yield name, w


def count_gguf_tensors(path: Path) -> int:
    return len(reader(str(path)).tensors)
