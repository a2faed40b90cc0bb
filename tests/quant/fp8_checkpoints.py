"""Tiny random fp8 checkpoints in the formats users download, and their dequantized twins.

Each format is written the way its producer writes it: float8_e4m3fn weights under the
module's own name, the scales beside them under theirs (dtype and shape included), and
config.json's `quantization_config` as published:
- `ct_tensor_static`: compressed-tensors per-tensor weights with static per-tensor activations
  (RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8): bf16 `weight_scale` [1], `input_scale` [1]
  calibrated on a few prompts;
- `ct_channel_dynamic`: compressed-tensors per-channel weights, dynamic per-token activations
  (the FP8-dynamic checkpoints): bf16 `weight_scale` [N, 1];
- `fbgemm`: FBGEMM fp8 (Meta's Llama-3.1-405B-FP8): float32 `weight_scale` [N, 1];
- `fp8_block`: DeepSeek-V3's block fp8: float32 `weight_scale_inv` [ceil(N/128), ceil(K/128)];
- `fp8_tensor_static`: AutoFP8's / vLLM's serialized fp8 (`quant_method: fp8` without blocks,
  static activations): float32 scalar `weight_scale` and `input_scale`;
- `ct_kv_tensor_static`: `ct_tensor_static` with fp8 KV-cache scales (llm-compressor's
  `kv_cache_scheme`, RedHatAI's *-FP8 with an fp8 KV cache): bf16 [1]
  `model.layers.N.self_attn.k_scale` / `v_scale`;
- `modelopt_tensor_static`: NVIDIA ModelOpt's FP8 export (nvidia/Llama-3.1-8B-Instruct-FP8):
  float32 scalar `weight_scale` and `input_scale`, float32 scalar KV scales under
  `self_attn.k_proj.k_scale` / `self_attn.v_proj.v_scale`, its settings in
  `hf_quant_config.json` beside a config.json without quantization_config (the first
  exports'; QUANTIZATION_CONFIGS has the config.json form later ones add).
KV scales are calibrated as the producers do: the largest |K| and |V| (after rotary, as the
cache holds them) over a few prompts, / 448 (tests/quant/fp8_kv.py).
The quantization here is written from the formats' definitions, not with atom's code. The
twin is a plain float checkpoint of exactly the dequantized weights, which transformers loads.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.engine.checkpoints import make_checkpoint
from tests.quant.fp8_kv import record_kv_amax

E4M3 = torch.float8_e4m3fn
FORMATS = ("ct_tensor_static", "ct_channel_dynamic", "fbgemm", "fp8_block", "fp8_tensor_static")
KV_FORMATS = ("ct_kv_tensor_static", "modelopt_tensor_static")  # with KV-cache scales
STATIC = ("ct_tensor_static", "fp8_tensor_static") + KV_FORMATS
# Where each KV format keeps layer N's scales, and their dtype and shape.
KV_SCALE_NAMES = {
    "ct_kv_tensor_static": ("model.layers.{}.self_attn.k_scale",
                            "model.layers.{}.self_attn.v_scale", torch.bfloat16, (1,)),
    "modelopt_tensor_static": ("model.layers.{}.self_attn.k_proj.k_scale",
                               "model.layers.{}.self_attn.v_proj.v_scale", torch.float32, ()),
}
# The linears a producer quantizes: every projection inside the decoder layers, DeepSeek's
# routed experts included (`...mlp.experts.N.gate_proj.weight`, as R1 ships them). The LM head,
# embeddings, norms and routers stay float (compressed-tensors' `ignore: [lm_head]`).
_QUANTIZED = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp|mlp\.shared_experts|"
                        r"mlp\.experts\.\d+)\.[a-z_]+_proj(_with_mqa)?\.weight$")
_EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.\d+\.")
# The ones atom runs as fp8 GEMMs: all of them but MLA's kv_b_proj, which it dequantizes (MLA
# reads it as a matrix).
_FLOAT_IN_ATOM = re.compile(r"\.kv_b_proj\.weight$")


def _args(strategy: str, dyn: bool) -> dict:
    return {"actorder": None, "block_structure": None, "dynamic": dyn, "group_size": None,
            "num_bits": 8, "observer": None if dyn else "minmax", "observer_kwargs": {},
            "strategy": strategy, "symmetric": True, "type": "float"}


def _ct_group(weights: str, dynamic: bool, kv: bool = False) -> dict:
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"],
            "kv_cache_scheme": _args("tensor", False) if kv else None,
            "config_groups": {"group_0": {
                "targets": ["Linear"], "output_activations": None,
                "weights": _args(weights, False),
                "input_activations": _args("token" if dynamic else "tensor", dynamic)}}}


QUANTIZATION_CONFIGS = {
    "ct_tensor_static": _ct_group("tensor", dynamic=False),
    "ct_channel_dynamic": _ct_group("channel", dynamic=True),
    "fbgemm": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
               "modules_to_not_convert": ["lm_head"]},
    "fp8_block": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                  "weight_block_size": [128, 128]},
    "fp8_tensor_static": {"quant_method": "fp8", "activation_scheme": "static"},
    "ct_kv_tensor_static": _ct_group("tensor", dynamic=False, kv=True),
    "modelopt_tensor_static": {"quant_method": "modelopt", "quant_algo": "FP8",
                               "kv_cache_scheme": {"num_bits": 8, "type": "float",
                                                   "dynamic": False},
                               "ignore": ["lm_head"],
                               "producer": {"name": "modelopt", "version": "0.29.0"}},
}
# ModelOpt's hf_quant_config.json, as nvidia/Llama-3.1-8B-Instruct-FP8 ships it.
HF_QUANT_CONFIG = {"producer": {"name": "modelopt", "version": "0.15.1"},
                   "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                                    "exclude_modules": ["lm_head"]}}


@dataclass
class Fp8Checkpoint:
    path: Path  # the fp8 checkpoint
    dequantized: Path  # the same weights dequantized: a plain float checkpoint
    fmt: str
    fp8_modules: set[str] = field(default_factory=set)  # module names atom runs in fp8
    # transformers' fused experts modules (`model.layers.N.mlp.experts`) whose experts are fp8
    fp8_experts: set[str] = field(default_factory=set)
    input_scales: dict[str, float] = field(default_factory=dict)  # module → static scale
    kv_scales: dict[int, tuple[float, float]] = field(default_factory=dict)  # as stored


def _to_e4m3(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (w / scale).clamp(-448.0, 448.0).to(E4M3)


def _quantize(w: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes, scale as stored, the dequantized weight) for one [N, K] float32 weight."""
    if fmt == "fp8_block":
        n, k = w.shape
        nb, kb = -(-n // 128), -(-k // 128)
        scale = torch.empty(nb, kb)
        for i in range(nb):
            for j in range(kb):
                scale[i, j] = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].abs().max() / 448
        full = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        codes = _to_e4m3(w, full)
        return codes, scale, codes.float() * full
    if fmt in ("ct_tensor_static", "ct_kv_tensor_static"):
        stored = (w.abs().max() / 448).reshape(1).to(torch.bfloat16)
    elif fmt in ("fp8_tensor_static", "modelopt_tensor_static"):
        stored = (w.abs().max() / 448).reshape(())
    else:
        stored = (w.abs().amax(dim=1, keepdim=True) / 448)
        stored = stored.to(torch.bfloat16) if fmt.startswith("ct_") else stored
    codes = _to_e4m3(w, stored.float())
    return codes, stored, codes.float() * stored.float()


@torch.no_grad()
def _calibrate(path: Path, modules: set[str]
               ) -> tuple[dict[str, float], dict[int, tuple[float, float]]]:
    """Static input scales and KV-cache scales as a calibration pass sets them: each module's
    largest input magnitude, and each layer's largest |K| and |V|, over a few prompts, / 448."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    kv_amax = record_kv_amax(model)
    amax: dict[str, float] = {}
    hooks = []
    for name, m in model.named_modules():
        if name in modules:
            def hook(_m, args, name=name):
                amax[name] = max(amax.get(name, 0.0), float(args[0].abs().max()))
            hooks.append(m.register_forward_pre_hook(hook))
    g = torch.Generator().manual_seed(7)
    for n in (5, 30, 60):
        model(torch.randint(3, 256, (1, n), generator=g))
    for h in hooks:
        h.remove()
    return ({k: v / 448 for k, v in amax.items()},
            {i: (k / 448, v / 448) for i, (k, v) in kv_amax.items()})


def write_fp8_checkpoint(arch: str, fmt: str, root: Path, seed: int = 0,
                         **overrides) -> Fp8Checkpoint:
    """The `fmt` checkpoint of a tiny random `arch` model (tests/engine/checkpoints.py) and
    its dequantized twin, under root."""
    base = make_checkpoint(arch, root / "float", seed, **overrides)
    state = load_file(str(base / "model.safetensors"))
    names = sorted(n for n in state if _QUANTIZED.match(n))
    modules = {n[:-len(".weight")] for n in names}
    experts = {_EXPERT.match(n).group(1) for n in names if _EXPERT.match(n)}
    out = Fp8Checkpoint(root / f"{arch}-{fmt}", root / f"{arch}-{fmt}-dequantized", fmt,
                        {n[:-len(".weight")] for n in names
                         if not _FLOAT_IN_ATOM.search(n) and not _EXPERT.match(n)}, experts)
    kv_scales: dict[int, tuple[float, float]] = {}
    if fmt in STATIC:
        assert not experts, "no static input scales are calibrated for routed experts"
        out.input_scales, kv_scales = _calibrate(base, modules)
    fp8, plain = dict(state), dict(state)
    for n in names:
        codes, scale, deq = _quantize(state[n], fmt)
        stem = n[:-len(".weight")]
        fp8[n] = codes
        fp8[stem + (".weight_scale_inv" if fmt == "fp8_block" else ".weight_scale")] = scale
        if fmt in STATIC:
            scale = torch.tensor([out.input_scales[stem]])
            fp8[stem + ".input_scale"] = (scale.to(torch.bfloat16) if fmt.startswith("ct_")
                                          else scale.reshape(()))
            out.input_scales[stem] = float(fp8[stem + ".input_scale"].float())
        plain[n] = deq
    if fmt in KV_FORMATS:
        k_name, v_name, dtype, shape = KV_SCALE_NAMES[fmt]
        for i, pair in kv_scales.items():
            stored = [torch.tensor(s).reshape(shape).to(dtype) for s in pair]
            fp8[k_name.format(i)], fp8[v_name.format(i)] = stored
            out.kv_scales[i] = tuple(float(t.float()) for t in stored)
    modelopt = fmt.startswith("modelopt")
    for target, tensors, qc in ((out.path, fp8, None if modelopt else QUANTIZATION_CONFIGS[fmt]),
                                (out.dequantized, plain, None)):
        shutil.copytree(base, target)
        save_file({k: v.contiguous() for k, v in tensors.items()},
                  str(target / "model.safetensors"), metadata={"format": "pt"})
        if qc is not None:
            cfg = json.loads((target / "config.json").read_text())
            cfg["quantization_config"] = qc
            (target / "config.json").write_text(json.dumps(cfg, indent=2))
    if modelopt:
        (out.path / "hf_quant_config.json").write_text(json.dumps(HF_QUANT_CONFIG, indent=4))
    return out
