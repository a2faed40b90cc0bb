"""Which fp8 scheme a run uses: `quant.method` against the checkpoint's `quantization_config`.

Read from config.json alone (no weights), so validation refuses what cannot run before loading
and the loader reads the same answer. Four checkpoint formats carry fp8 weights, all
float8_e4m3fn codes with float32 scales beside them:
- compressed-tensors (RedHatAI / neuralmagic FP8): `X.weight_scale` per tensor or per output
  channel, `X.input_scale` when activations are static, dynamic per-token otherwise;
- FBGEMM (`fbgemm_fp8`): per-channel `weight_scale`, dynamic per-token activations;
- `fp8` (vLLM's and DeepSeek-V3's): `weight_scale_inv` per `weight_block_size` block, or
  `weight_scale` per tensor when there are no blocks; `activation_scheme` static or dynamic;
- ModelOpt (`modelopt`, NVIDIA's `nvidia/*-FP8`): `quant_algo: FP8`, a float32 scalar
  `weight_scale` and `input_scale` per linear, its settings in `hf_quant_config.json` beside
  config.json (older exports have nothing in config.json) or in config.json itself.
The scale tensors' shapes say per tensor or per channel; the scheme says what they cannot.
Any of them may also carry per-tensor fp8 KV-cache scales (compressed-tensors'
`kv_cache_scheme`, ModelOpt's `kv_cache_quant_algo`, AutoFP8's `kv_cache_scheme: static`):
`Fp8Scheme.kv_scales` says the checkpoint declares them (atom/loader/kv_scales.py reads them).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional, Union

from atom.config.errors import ConfigError
from atom.config.schema import Config

QUANT_METHODS = ("auto", "none", "fp8", "fp8_block")
CHECKPOINT_METHODS = ("compressed-tensors", "fbgemm_fp8", "fp8", "modelopt")
MODELOPT_FILE = "hf_quant_config.json"  # ModelOpt's settings, beside config.json
BLOCK = (128, 128)  # the only block shape the kernels take (DeepSeek-V3/R1, Qwen3-FP8)
QC_FIELD = "model.hf_config.quantization_config"


@dataclass(frozen=True)
class Fp8Scheme:
    source: str  # "online" (float weights quantized at load) or the checkpoint's quant_method
    block: Optional[tuple[int, int]]  # weight_block_size; None: per-tensor or per-channel scales
    static_input: bool  # activations scaled by the checkpoint's input_scale (else dynamic)
    kv_scales: bool = False  # the checkpoint declares per-tensor fp8 k_scale / v_scale tensors

    @property
    def online(self) -> bool:
        return self.source == "online"


def checkpoint_quant_config(cfg: Config) -> Optional[dict[str, Any]]:
    """The checkpoint's quantization_config (config.json, or hf_config for a described model,
    or ModelOpt's hf_quant_config.json), as the loader will read it (quant_config_of)."""
    m = cfg.model
    if m.path is not None:
        cfg_file = os.path.join(m.path, "config.json")
        if not os.path.isfile(cfg_file):
            return None
        with open(cfg_file) as f:
            return quant_config_of(json.load(f).get("quantization_config"), m.path)
    return m.hf_config.get("quantization_config") if m.hf_config else None


def quant_config_of(qc: Any, directory: Optional[Union[str, os.PathLike]]) -> Optional[dict]:
    """config.json's quantization_config when it names its quant_method; else ModelOpt's
    hf_quant_config.json in the checkpoint `directory` when there is one (its exporter writes
    that file always, and into config.json nothing or a copy without quant_method), as a
    `modelopt` quantization_config."""
    qc = as_dict(qc)
    if qc is not None and qc.get("quant_method"):
        return qc
    path = None if directory is None else os.path.join(directory, MODELOPT_FILE)
    if path is None or not os.path.isfile(path):
        return qc
    with open(path) as f:
        settings = json.load(f).get("quantization") or {}
    return {"quant_method": "modelopt", **settings}


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
    kv = qc.get("kv_cache_scheme")
    if kv is not None and (not isinstance(kv, dict)
                           or (kv.get("num_bits"), kv.get("type")) != (8, "float")
                           or kv.get("strategy", "tensor") != "tensor" or kv.get("dynamic")):
        errors.append(ConfigError(f"{QC_FIELD}.kv_cache_scheme", kv,
                                  "only static fp8 KV-cache scales per tensor are read"))
    return Fp8Scheme("compressed-tensors", None, static, kv_scales=kv is not None)


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
    kv = qc.get("kv_cache_scheme")
    if kv not in (None, "static"):
        errors.append(ConfigError(f"{QC_FIELD}.kv_cache_scheme", kv, "must be static or absent"))
    return Fp8Scheme("fp8", BLOCK if block is not None else None, scheme == "static",
                     kv_scales=kv == "static")


def _modelopt(qc: dict[str, Any], errors: list[ConfigError]) -> Fp8Scheme:
    """ModelOpt's settings: `quant_algo` and `kv_cache_quant_algo` at the top (as quant_config_of
    lifts hf_quant_config.json's `quantization`) or under `quantization`; in config.json the KV
    algorithm may be a `kv_cache_scheme` string or compressed-tensors' dict instead."""
    settings = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else qc
    algo = str(settings.get("quant_algo") or "").upper()
    if algo != "FP8":
        errors.append(ConfigError(f"{QC_FIELD}.quant_algo", settings.get("quant_algo"),
                                  "only FP8 (e4m3 weights scaled per tensor, static activation "
                                  "scales) runs"))
    kv = settings.get("kv_cache_quant_algo", settings.get("kv_cache_scheme"))
    if isinstance(kv, dict):
        kv = "FP8" if (kv.get("num_bits"), kv.get("type")) == (8, "float") else str(kv)
    if kv is not None and str(kv).upper() not in ("FP8", "NONE"):
        errors.append(ConfigError(f"{QC_FIELD}.kv_cache_quant_algo", kv,
                                  "only FP8 KV-cache scales (or none) are read"))
    return Fp8Scheme("modelopt", None, True, kv_scales=kv is not None and str(kv).upper() == "FP8")


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
    elif method == "modelopt":
        scheme = _modelopt(qc, errors)
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
