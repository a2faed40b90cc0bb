"""Which fp8 scheme a run uses: `quant.method` against the checkpoint's `quantization_config`.

Read from config.json alone (no weights), so validation refuses what cannot run before loading
and the loader reads the same answer. Three checkpoint formats carry fp8 weights, all
float8_e4m3fn codes with float32 scales beside them:
- compressed-tensors (RedHatAI / neuralmagic FP8): `X.weight_scale` per tensor or per output
  channel, `X.input_scale` when activations are static, dynamic per-token otherwise;
- FBGEMM (`fbgemm_fp8`): per-channel `weight_scale`, dynamic per-token activations;
- `fp8` (vLLM's and DeepSeek-V3's): `weight_scale_inv` per `weight_block_size` block, or
  `weight_scale` per tensor when there are no blocks; `activation_scheme` static or dynamic.
The scale tensors' shapes say per tensor or per channel; the scheme says what they cannot.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional

from atom.config.errors import ConfigError
from atom.config.schema import Config

QUANT_METHODS = ("auto", "none", "fp8", "fp8_block")
CHECKPOINT_METHODS = ("compressed-tensors", "fbgemm_fp8", "fp8")
BLOCK = (128, 128)  # the only block shape the kernels take (DeepSeek-V3/R1, Qwen3-FP8)
QC_FIELD = "model.hf_config.quantization_config"


@dataclass(frozen=True)
class Fp8Scheme:
    source: str  # "online" (float weights quantized at load) or the checkpoint's quant_method
    block: Optional[tuple[int, int]]  # weight_block_size; None: per-tensor or per-channel scales
    static_input: bool  # activations scaled by the checkpoint's input_scale (else dynamic)

    @property
    def online(self) -> bool:
        return self.source == "online"


def checkpoint_quant_config(cfg: Config) -> Optional[dict[str, Any]]:
    """The checkpoint's quantization_config (config.json, or hf_config for a described model),
    as the loader's transformers config will carry it."""
    m = cfg.model
    if m.path is not None:
        cfg_file = os.path.join(m.path, "config.json")
        if not os.path.isfile(cfg_file):
            return None
        with open(cfg_file) as f:
            return json.load(f).get("quantization_config")
    return m.hf_config.get("quantization_config") if m.hf_config else None


def as_dict(qc: Any) -> Optional[dict[str, Any]]:
    """transformers keeps quantization_config as a dict or as a config object."""
    if qc is None or isinstance(qc, dict):
        return qc
    return qc.to_dict()


def _compressed_tensors(qc: dict[str, Any], errors: list[ConfigError]) -> Fp8Scheme:
    groups = qc.get("config_groups") or {}
    static = False
    for name, g in groups.items():
        w, a = g.get("weights") or {}, g.get("input_activations")
        if (w.get("num_bits"), w.get("type")) != (8, "float") or w.get("strategy") not in (
                "tensor", "channel"):
            errors.append(ConfigError(f"{QC_FIELD}.config_groups.{name}.weights", w,
                                      "only 8-bit float weights per tensor or per channel run"))
        ok = a is not None and (a.get("num_bits"), a.get("type")) == (8, "float") and (
            (a.get("dynamic") is True and a.get("strategy") == "token")
            or (a.get("dynamic") is False and a.get("strategy") == "tensor"))
        if not ok:
            errors.append(ConfigError(f"{QC_FIELD}.config_groups.{name}.input_activations", a,
                                      "only fp8 activations, dynamic per token or static per "
                                      "tensor, run"))
        else:
            static = static or a.get("dynamic") is False
    if not groups:
        errors.append(ConfigError(f"{QC_FIELD}.config_groups", groups, "no quantization group"))
    return Fp8Scheme("compressed-tensors", None, static)


def _fp8(qc: dict[str, Any], errors: list[ConfigError]) -> Fp8Scheme:
    fmt = qc.get("fmt", "e4m3")
    if fmt != "e4m3":
        errors.append(ConfigError(f"{QC_FIELD}.fmt", fmt, "only e4m3 fp8 weights run"))
    scheme = qc.get("activation_scheme", "dynamic")
    block = qc.get("weight_block_size")
    if block is not None and tuple(block) != BLOCK:
        errors.append(ConfigError(f"{QC_FIELD}.weight_block_size", block,
                                  f"only {list(BLOCK)} blocks run"))
    if scheme not in ("static", "dynamic") or (block is not None and scheme != "dynamic"):
        errors.append(ConfigError(f"{QC_FIELD}.activation_scheme", scheme,
                                  "must be dynamic (or static, without weight blocks)"))
    return Fp8Scheme("fp8", BLOCK if block is not None else None, scheme == "static")


def checkpoint_scheme(qc: dict[str, Any]) -> Fp8Scheme:
    """The scheme a checkpoint's quantization_config describes; every problem raised at once."""
    method = qc.get("quant_method")
    if method not in CHECKPOINT_METHODS:
        raise ConfigError(QC_FIELD, method, "quant_method must be one of "
                          f"{', '.join(CHECKPOINT_METHODS)} (fp8 weights)")
    errors: list[ConfigError] = []
    if method == "compressed-tensors":
        scheme = _compressed_tensors(qc, errors)
    elif method == "fbgemm_fp8":
        scheme = Fp8Scheme("fbgemm_fp8", None, False)
    else:
        scheme = _fp8(qc, errors)
    if errors:
        raise ConfigError.all_of(errors)
    return scheme


def resolve_scheme(method: str, qc: Any, gguf: bool, dummy: bool) -> Optional[Fp8Scheme]:
    """The run's fp8 scheme, None for unquantized (or GGUF-quantized) weights."""
    qc = as_dict(qc)
    if method not in QUANT_METHODS:
        raise ConfigError("quant.method", method, f"must be one of {', '.join(QUANT_METHODS)}")
    if gguf:  # quant=fp8: the GGUF's dequantized values quantized per channel, as a float
        if method == "fp8_block":  # checkpoint's are (GGUF blocks have no fp8 kernel)
            raise ConfigError("quant.method", method, "a GGUF has no 128x128 block scales: "
                              "quant=fp8 quantizes its weights per channel at load")
        return Fp8Scheme("online", None, False) if method == "fp8" else None
    ckpt = checkpoint_scheme(qc) if qc else None
    if method == "auto":
        return ckpt
    if method == "none":
        if ckpt is not None:
            raise ConfigError("quant.method", method, f"the checkpoint is quantized "
                              f"({qc.get('quant_method')}): use quant=auto")
        return None
    if ckpt is None:
        if method == "fp8_block" and not dummy:
            raise ConfigError("quant.method", method, "the checkpoint has no block scales "
                              "(weight_scale_inv): quant=fp8 quantizes it per channel at load")
        return Fp8Scheme("online", BLOCK if method == "fp8_block" else None, False)
    if (method == "fp8_block") != (ckpt.block is not None):
        held = "128x128-block" if ckpt.block is not None else "per-tensor or per-channel"
        raise ConfigError("quant.method", method, f"the checkpoint's fp8 weights are {held} "
                          "scaled: use quant=auto")
    return ckpt


def fp8_capability_problem(capability: Optional[tuple[int, int]], kernels: str
                           ) -> Optional[ConfigError]:
    """fp8 GEMMs need fp8 tensor cores (compute capability 8.9: Ada, Hopper and later). The
    torch kernels emulate fp8 in float32 and run anywhere; capability None is a CPU."""
    if capability is None or kernels == "torch" or capability >= (8, 9):
        return None
    return ConfigError("quant.method", "fp8", f"this GPU (compute capability "
                       f"{capability[0]}.{capability[1]}) has no fp8 tensor cores (8.9+); "
                       "use quant=none with a float checkpoint, or runtime.kernels=torch")
