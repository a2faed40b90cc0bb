"""The quant config group and every refusal: each names its field and comes before any weight
is read (the checkpoints here are a config.json alone: there is nothing to load)."""
from __future__ import annotations

import json

import pytest

import atom
from atom.config.errors import ConfigError
from atom.config.flags import ENGINE_FLAGS, config_from_kwargs
from atom.config.quant import fp8_capability_problem
from tests.quant.fp8_checkpoints import HF_QUANT_CONFIG, KV_FORMATS, QUANTIZATION_CONFIGS

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
         "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2}


def _checkpoint(tmp_path, qc=None, hf_quant_config=None):
    cfg = dict(LLAMA, **({"quantization_config": qc} if qc is not None else {}))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if hf_quant_config is not None:  # ModelOpt's file beside config.json
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(hf_quant_config))
    return tmp_path


def _errors(*overrides: str) -> dict[str, ConfigError]:
    with pytest.raises(ConfigError) as e:
        atom.compose(list(overrides))
    return {err.field: err for err in e.value.errors}


def _local(path, *extra):
    return ["model=local", f"model.path={path}", *extra]


@pytest.mark.parametrize("method", ["auto", "none", "fp8", "fp8_block"])
def test_every_group_option_composes(method):
    cfg = atom.compose(["model=tiny_llama", "load=dummy", f"quant={method}"])
    assert cfg.quant.method == method


def test_the_default_is_auto_and_a_float_checkpoint_runs_unquantized(tmp_path):
    from atom.config.quant import checkpoint_quant_config, resolve_scheme

    cfg = atom.compose(_local(_checkpoint(tmp_path)))
    assert cfg.quant.method == "auto"
    assert resolve_scheme("auto", checkpoint_quant_config(cfg), False, False) is None


@pytest.mark.parametrize("fmt", sorted(QUANTIZATION_CONFIGS))
def test_auto_takes_each_checkpoint_format(tmp_path, fmt):
    from atom.config.quant import checkpoint_quant_config, resolve_scheme

    cfg = atom.compose(_local(_checkpoint(tmp_path, QUANTIZATION_CONFIGS[fmt])))
    scheme = resolve_scheme(cfg.quant.method, checkpoint_quant_config(cfg), False, False)
    assert (scheme.block is not None) == (fmt == "fp8_block")
    assert scheme.static_input == fmt.endswith("_static")
    assert scheme.kv_scales == (fmt in KV_FORMATS)
    assert not scheme.online


# ModelOpt's exporter writes hf_quant_config.json always, and into config.json nothing (the
# first exports) or a compressed-tensors-like copy without quant_method (convert_hf_config.py).
_MODELOPT_COPY = {"config_groups": {"group_0": {
    "input_activations": {"dynamic": False, "num_bits": 8, "type": "float"},
    "weights": {"dynamic": False, "num_bits": 8, "type": "float"}}},
    "ignore": ["lm_head"], "quant_algo": "FP8", "kv_cache_scheme": "FP8",
    "producer": {"name": "modelopt", "version": "0.29.0"}, "quant_library": "modelopt"}


@pytest.mark.parametrize("in_config_json", [None, _MODELOPT_COPY], ids=["alone", "with_copy"])
def test_auto_takes_modelopts_hf_quant_config_json(tmp_path, in_config_json):
    from atom.config.quant import checkpoint_quant_config, resolve_scheme

    cfg = atom.compose(_local(_checkpoint(tmp_path, in_config_json, HF_QUANT_CONFIG)))
    scheme = resolve_scheme("auto", checkpoint_quant_config(cfg), False, False)
    assert (scheme.source, scheme.block, scheme.static_input, scheme.kv_scales) == (
        "modelopt", None, True, True)


@pytest.mark.parametrize("algo", ["NVFP4", "W4A8_AWQ", "FP8_PER_CHANNEL_PER_TOKEN"])
def test_a_modelopt_algorithm_other_than_fp8_is_refused_by_field_before_weights_load(
        tmp_path, algo):
    """The checkpoint has no weight file at all: the refusal comes from its configs alone."""
    hqc = {**HF_QUANT_CONFIG, "quantization": {**HF_QUANT_CONFIG["quantization"],
                                               "quant_algo": algo}}
    errs = _errors(*_local(_checkpoint(tmp_path, hf_quant_config=hqc)))
    assert errs["model.hf_config.quantization_config.quant_algo"].value == algo


@pytest.mark.parametrize("qc,field", [
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"},
     "kv_cache_quant_algo"),
    (dict(QUANTIZATION_CONFIGS["ct_kv_tensor_static"], kv_cache_scheme={
        "num_bits": 8, "type": "float", "strategy": "attn_head", "dynamic": False}),
     "kv_cache_scheme"),
    ({"quant_method": "fp8", "activation_scheme": "static", "kv_cache_scheme": "dynamic"},
     "kv_cache_scheme"),
])
def test_kv_cache_scales_other_than_fp8_per_tensor_are_refused_by_field(tmp_path, qc, field):
    errs = _errors(*_local(_checkpoint(tmp_path, qc)))
    assert f"model.hf_config.quantization_config.{field}" in errs


def test_the_vllm_flag_and_keyword_set_quant_method():
    flag = next(f for f in ENGINE_FLAGS if f.path == "quant.method")
    assert "--quantization" in flag.names
    assert config_from_kwargs("tiny_llama", load_dummy="xavier", quantization="fp8").quant.method == "fp8"


def test_an_unknown_quant_method_names_the_checkpoints_quantization_config(tmp_path):
    errs = _errors(*_local(_checkpoint(tmp_path, {"quant_method": "awq", "bits": 4})))
    assert errs["model.hf_config.quantization_config"].value == "awq"


def test_every_compressed_tensors_problem_is_reported_at_once(tmp_path):
    qc = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": None}}}
    errs = _errors(*_local(_checkpoint(tmp_path, qc)), "kv_cache.dtype=fp16")
    base = "model.hf_config.quantization_config.config_groups.group_0"
    assert {f"{base}.weights", f"{base}.input_activations", "kv_cache.dtype"} <= set(errs)


def test_block_fp8_needs_128_blocks_and_dynamic_activations(tmp_path):
    qc = dict(QUANTIZATION_CONFIGS["fp8_block"], weight_block_size=[64, 64],
              activation_scheme="static")
    errs = _errors(*_local(_checkpoint(tmp_path, qc)))
    assert {"model.hf_config.quantization_config.weight_block_size",
            "model.hf_config.quantization_config.activation_scheme"} <= set(errs)


@pytest.mark.parametrize("qc_fmt,method", [(None, "fp8_block"), ("fp8_block", "fp8"),
                                           ("ct_channel_dynamic", "fp8_block"),
                                           ("fbgemm", "none")])
def test_a_method_the_checkpoint_contradicts_names_quant_method(tmp_path, qc_fmt, method):
    qc = None if qc_fmt is None else QUANTIZATION_CONFIGS[qc_fmt]
    errs = _errors(*_local(_checkpoint(tmp_path, qc), f"quant={method}"))
    assert errs["quant.method"].value == method


def test_a_gguf_takes_online_fp8_but_not_block_fp8():
    from atom.config.quant import resolve_scheme

    assert resolve_scheme("fp8", None, gguf=True, dummy=False).online
    assert resolve_scheme("auto", None, gguf=True, dummy=False) is None
    errs = _errors("model=smollm2_135m", "quant=fp8_block")  # the embedded default is a GGUF
    assert "GGUF" in errs["quant.method"].rule


def test_fp8_needs_fp8_tensor_cores_unless_the_torch_kernels_emulate_it():
    err = fp8_capability_problem((8, 0), "triton")  # A100
    assert err is not None and err.field == "quant.method" and "8.0" in err.rule
    assert fp8_capability_problem((8, 9), "triton") is None  # L40S / Ada
    assert fp8_capability_problem((9, 0), "triton") is None  # H100 / H200
    assert fp8_capability_problem((8, 0), "torch") is None
    assert fp8_capability_problem(None, "cpu") is None
