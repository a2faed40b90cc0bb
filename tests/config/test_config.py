"""Every YAML composes and validates; every invalid-config rule stops with a message naming the
field, the value and the rule, before anything heavy happens."""
from __future__ import annotations

import subprocess
import sys

import pytest

import atom
from atom.config.compose import CONF_DIR
from atom.config.errors import ConfigError

# Options that need more than their own YAML to validate: what they need is added here.
NEEDS = {("specdecode", "eagle3"): ["specdecode.draft_model=/tmp"],
         ("specdecode", "draft_model"): ["specdecode.draft_model=/tmp"],
         ("quant", "fp8_block"): ["model=tiny_llama", "load=dummy"]}  # the default is a GGUF
OWN_TESTS = {("model", "local")}  # each has a test below
HF_ONLY_MODELS = {"qwen3_0_6b", "llama3_8b", "tiny_llama", "tiny_qwen3", "deepseek_r1",
                  "tiny_deepseek_v3", "glm4_5_air", "minimax_m2", "deepseek_v3", "kimi_k2"}


def _options():
    for group_dir in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "experiment"):
        for yaml in sorted(group_dir.glob("*.yaml")):
            if (group_dir.name, yaml.stem) not in OWN_TESTS:
                yield group_dir.name, yaml.stem


@pytest.mark.parametrize("group,option", list(_options()))
def test_every_group_option_composes(group, option):
    extra = NEEDS.get((group, option)) or []
    if group == "parallel":  # the default model's 9 heads divide by no TP size above 1
        extra = extra + ["model=llama3_8b", "load=dummy"]
    if group == "model" and option in HF_ONLY_MODELS:
        extra = extra + ["load=dummy"]
    cfg = atom.compose([f"{group}={option}", *extra])
    assert cfg is not None


def test_local_model_needs_an_existing_path(tmp_path):
    with pytest.raises(ConfigError, match=r"model.path=.*path does not exist"):
        atom.compose(["model=local", f"model.path={tmp_path}/nope"])


@pytest.mark.parametrize("overrides,field,rule", [
    (["kv_cache.dtype=fp16"], "kv_cache.dtype", "must be one of bf16, fp8"),
    (["model=qwen3_0_6b", "load=dummy", "parallel.tensor_parallel_size=3"],
     "parallel.tensor_parallel_size", "must divide the number of attention heads"),
    (["model=tiny_qwen3", "load=dummy", "model.hf_config.num_attention_heads=12",
      "model.hf_config.num_key_value_heads=3", "parallel=tp4"], "parallel.tensor_parallel_size",
     "must divide the number of KV heads (3) or be a multiple of it"),
    (["scheduler.max_num_batched_tokens=8"], "scheduler.max_num_batched_tokens",
     "must be >= kv_cache.block_size"),
    (["specdecode=eagle3"], "specdecode.draft_model", "a draft model is required for method eagle3"),
    (["specdecode=mtp", "specdecode.num_speculative_tokens=2", "+specdecode.acceptance_length=3.5"],
     "specdecode.acceptance_length", "must be in [1, num_speculative_tokens + 1]"),
    (["specdecode=mtp", "specdecode.acceptance_length=1.5", "specdecode.acceptance_rate=0.5"],
     "specdecode.acceptance_length", "mutually exclusive"),
    (["specdecode=mtp", "specdecode.acceptance_rate=1.5"], "specdecode.acceptance_rate",
     "must be in [0, 1]"),
    (["specdecode=ngram", "specdecode.prompt_lookup_min=0"], "specdecode.prompt_lookup_min",
     "must be >= 1"),
    (["specdecode=ngram", "specdecode.prompt_lookup_min=3", "specdecode.prompt_lookup_max=2"],
     "specdecode.prompt_lookup_max", "must be >= prompt_lookup_min (3)"),
    (["specdecode=ngram", "specdecode.acceptance_rate=0.5", "specdecode.acceptance_length=2"],
     "specdecode.acceptance_length", "mutually exclusive"),
    (["model=tiny_llama"], "load.dummy", "needs load.dummy"),
    (["kv_cache.block_size=abc"], "kv_cache.block_size", "could not be converted to Integer"),
    (["runtime.kernels=aiter"], "runtime.kernels", "aiter backend needs ROCm"),
    (["runtime.level=4"], "runtime.level", "must be in 0..3"),
    (["kv_cache.block_size=12"], "kv_cache.block_size", "power of two"),
    (["format.tool_call_parser=bogus"], "format.tool_call_parser", "must be one of"),
])
def test_invalid_config_names_field_value_and_rule(overrides, field, rule):
    overrides = [o.replace("+specdecode", "specdecode") for o in overrides]
    with pytest.raises(ConfigError) as e:
        atom.compose(overrides)
    assert e.value.field == field
    assert rule in str(e.value)


def test_a_parallel_size_the_server_cannot_run_exits_with_one_line_and_no_core():
    """dp2 replicas over two hosts compose, but are not implemented: refused in the API
    process, before a core process is spawned or a weight is read."""
    r = subprocess.run([sys.executable, "-m", "atom.run", "model=tiny_llama", "load=dummy",
                        "runtime=cpu", "parallel=tp2", "parallel.data_parallel_size=2",
                        "parallel.nnodes=2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert err[-1].startswith("atom: invalid config: parallel.data_parallel_size=2: not implemented "
                              "yet over several hosts")
    assert "engine core" not in r.stderr


def test_cfg_job_prints_the_resolved_tree():
    r = subprocess.run([sys.executable, "-m", "atom.run", "kv_cache=fp8", "--cfg", "job"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "dtype: fp8" in r.stdout and "max_num_batched_tokens: 16384" in r.stdout


@pytest.mark.parametrize("override", ["kv_cache.blok_size=16", "+kv_cache.blok_size=16"])
def test_an_unknown_key_is_refused_with_or_without_plus(override):
    """Hydra suggests `+key=value` for an unknown key; added, it used to be dropped silently."""
    with pytest.raises(ConfigError) as e:
        atom.compose([override])
    assert str(e.value) == ("invalid config: kv_cache.blok_size=16: no such field "
                            "(did you mean block_size?)")


def test_a_wrong_group_option_lists_the_choices():
    with pytest.raises(ConfigError) as e:
        atom.compose(["kv_cache=fp16"])
    assert str(e.value) == "invalid config: kv_cache='fp16': must be one of bf16, fp8"


def test_every_broken_rule_is_reported_at_once_the_most_fundamental_first():
    """The architecture before load.dummy, then what the engine cannot run (EP over replicas, an
    eagle3 head that is not there), which a launcher checks with the rest; plain composition
    accepts what a benchmark config may name."""
    from atom.config.compose import compose

    v2 = "model.hf_config.architectures=[DeepseekV2ForCausalLM]"  # not implemented yet
    with pytest.raises(ConfigError) as e:
        compose(["model=deepseek_r1", v2, "parallel=tp8", "parallel.enable_expert_parallel=true",
                 "parallel.data_parallel_size=2", "specdecode=mtp", "specdecode.method=eagle3",
                 "specdecode.draft_model=/absent",
                 "kv_cache.dtype=fp16"], launching=True)
    assert [(x.field, x.value) for x in e.value.errors] == [
        ("model", "DeepseekV2ForCausalLM"), ("load.dummy", None),
        ("parallel.enable_expert_parallel", True), ("specdecode.draft_model", "/absent"),
        ("kv_cache.dtype", "fp16")]
    assert len(str(e.value).splitlines()) == 5
    with pytest.raises(ConfigError) as e:
        atom.compose(["model=deepseek_r1", v2, "parallel=tp8", "specdecode=mtp"])
    assert [x.field for x in e.value.errors] == ["model", "load.dummy"]


@pytest.mark.parametrize("method", ["ngram", "mtp", "eagle3", "draft_model"])
def test_every_method_launches_and_a_draft_is_read_before_loading(method, tmp_path):
    """ngram and mtp launch on DeepSeek-R1's config (mtp: it has next-n layers); eagle3 and
    draft_model read their draft's config.json at launch, so an empty folder is refused naming
    the field (their runs: tests/engine/test_eagle3_spec_decode.py, _draft_model_)."""
    from atom.config.compose import compose

    pick = [f"specdecode={method}", "model=deepseek_r1", "load=dummy"]
    if method in ("ngram", "mtp"):
        assert compose(pick, launching=True).specdecode.method == method
        return
    with pytest.raises(ConfigError) as e:
        compose([*pick, f"specdecode.draft_model={tmp_path}"], launching=True)
    assert [x.field for x in e.value.errors] == ["specdecode.draft_model"]
    assert "has no readable config.json" in str(e.value)


def test_compose_leaves_no_global_hydra_state():
    from hydra.core.global_hydra import GlobalHydra

    atom.compose([])
    assert not GlobalHydra.instance().is_initialized()


def test_engine_kwargs_map_onto_the_same_tree():
    from atom.config.flags import config_from_kwargs

    cfg = config_from_kwargs(model="tiny_llama", load_dummy="xavier", kv_cache_dtype="fp8",
                             tensor_parallel_size=2, max_num_seqs=8, gpu_memory_utilization=0.5)
    assert (cfg.kv_cache.dtype, cfg.parallel.tensor_parallel_size, cfg.scheduler.max_num_seqs,
            cfg.kv_cache.gpu_memory_utilization, cfg.load.dummy) == ("fp8", 2, 8, 0.5, "xavier")
    with pytest.raises(TypeError, match="unknown argument"):
        config_from_kwargs(model="tiny_llama", not_a_field=1)


def test_every_spec_engine_flag_has_a_home_with_the_spec_default():
    from atom.config.flags import ENGINE_FLAGS, SERVER_FLAGS, _get
    from atom.config.schema import Config

    spec = {"--trust-remote-code": False, "--tensor-parallel-size": 1, "--data-parallel-size": 1,
            "--enforce-eager": False, "--enable-prefix-caching": False, "--enable-log-stats": True,
            "--throughput-log-interval": 10.0, "--port": 8006, "--kv-cache-dtype": "bf16",
            "--block-size": 16, "--max-model-len": None, "--max-num-batched-tokens": 16384,
            "--max-num-seqs": 512, "--gpu-memory-utilization": 0.9,
            "--scheduler-delay-factor": 0.0, "--level": 3, "--load-dummy": None,
            "--enable-expert-parallel": False, "--enable-dp-attention": False,
            "--method": None, "--num-speculative-tokens": 1, "--host": "0.0.0.0",
            "--server-port": 8000, "--timeout-keep-alive": 5, "--disable-uvicorn-access-log": False,
            "--tool-call-parser": "auto"}
    flags = {f.names[0]: f for f in ENGINE_FLAGS + SERVER_FLAGS}
    defaults = Config()
    for name, value in spec.items():
        assert name in flags, name
        assert _get(defaults, flags[name].path) == value, name
    sizes = _get(defaults, flags["--cudagraph-capture-sizes"].path)
    assert sizes[:3] == [1, 2, 4] and sizes[-1] == 256


def test_multirun_sweeps_and_leaves_each_resolved_config_beside_its_outputs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "atom.run", "-m", "job=generate", "model=tiny_llama",
                        "load=dummy", "runtime=cpu", "kv_cache=bf16,fp8",
                        f"hydra.sweep.dir={tmp_path}"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    configs = sorted(tmp_path.glob("*/config.yaml"))
    assert [c.parent.name for c in configs] == ["0", "1"]
    assert ["dtype: bf16" in c.read_text() for c in configs] == [True, False]
    assert "dtype: fp8" in configs[1].read_text()
