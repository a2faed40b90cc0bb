"""A checkpoint's per-layer fp8 KV-cache scales: the (k_scale, v_scale) each layer's cache uses.

Each producer names them after a different module of the attention block, one float scalar
per layer for the whole layer's K (and V) over every head, so each tensor-parallel rank reads
the same values:
- compressed-tensors (`kv_cache_scheme`): `model.layers.N.self_attn.k_scale` / `v_scale`, bf16 [1];
- ModelOpt (`kv_cache_quant_algo: FP8`): `model.layers.N.self_attn.k_proj.k_scale` /
  `v_proj.v_scale`, float32 scalars (its k/v_bmm_quantizer's amax / 448);
- checkpoints re-saved from vLLM: `self_attn.attn.k_scale` / `v_scale`;
- the deprecated single `self_attn.kv_scale`, which vLLM takes for both K and V.
Each is a dequantization multiplier: the cache holds x / scale in e4m3 and attention reads
code * scale (torch_ref._quant / _dequant), as vLLM's k_scale / v_scale.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Optional

from safetensors import safe_open

_KV_SCALE = re.compile(r"layers\.(\d+)\.self_attn\.(?:k_proj\.|v_proj\.|attn\.)?"
                       r"(k_scale|v_scale|kv_scale)$")


def is_kv_scale(name: str) -> bool:
    return _KV_SCALE.search(name) is not None


def read_kv_scales(files: list[Path]) -> dict[int, tuple[float, float]]:
    """{layer index: (k_scale, v_scale)} of every layer the checkpoint scales; empty when it
    carries none. A layer with only one of the two, a scale that is not one positive finite
    value, is refused: its cache could not be read back."""
    found: dict[int, dict[str, float]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for name in h.keys():
                m = _KV_SCALE.search(name)
                if m is None:
                    continue
                t = h.get_tensor(name)
                value = float(t.float().reshape(-1)[0]) if t.numel() == 1 else math.nan
                if not (math.isfinite(value) and value > 0):
                    raise ValueError(f"KV-cache scale {name} must be one positive finite value "
                                     f"(per tensor), got shape {list(t.shape)}: {t.flatten()[:4]}")
                layer = found.setdefault(int(m.group(1)), {})
                for kind in (("k_scale", "v_scale") if m.group(2) == "kv_scale" else (m.group(2),)):
                    layer[kind] = value
    scales = {}
    for i, layer in sorted(found.items()):
        if set(layer) != {"k_scale", "v_scale"}:
            raise ValueError(f"layer {i} of the checkpoint has {sorted(layer)} but needs both "
                             "a k_scale and a v_scale")
        scales[i] = (layer["k_scale"], layer["v_scale"])
    return scales


def checkpoint_kv_scales(files: Optional[list[Path]], declared: bool,
                         num_layers: int) -> dict[int, tuple[float, float]]:
    """The scales of the model's `num_layers` attention layers (a next-n layer the model skips
    has no cache to scale). `declared`: the quantization_config has a KV scheme, so finding no
    scale at all means they are named in a way atom does not read. `files` None: no checkpoint
    is read (dummy weights, a GGUF)."""
    if files is None:
        return {}
    scales = {i: s for i, s in read_kv_scales(files).items() if i < num_layers}
    if declared and not scales:
        raise ValueError("the checkpoint's quantization_config declares fp8 KV-cache scales, "
                         "but it has no k_scale / v_scale tensor under a name atom reads "
                         "(self_attn.k_scale, self_attn.k_proj.k_scale, self_attn.attn.k_scale, "
                         "self_attn.kv_scale)")
    return scales
