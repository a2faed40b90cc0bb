"""The parallel group's rules, before any weights: hosts (from the config, else torchrun's
environment), the executor, and what tensor / expert parallelism splits for every architecture
atom runs — each broken rule naming its field."""
from __future__ import annotations

import pytest

from atom.config.compose import compose
from atom.config.errors import ConfigError
from atom.config.hosts import Hosts, resolve_hosts
from atom.config.schema import ParallelConfig
from tests.engine.checkpoints import ALL_ARCHS, COMMON

TORCHRUN_HOST_1 = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}


def test_torchrun_one_launcher_per_host_gives_the_hosts():
    assert resolve_hosts(ParallelConfig(), TORCHRUN_HOST_1) == Hosts(2, 1, "10.0.0.1", 29400)


def test_under_torchrun_the_ranks_meet_above_its_agents_port():
    env = {**TORCHRUN_HOST_1, "TORCHELASTIC_RUN_ID": "none"}
    assert resolve_hosts(ParallelConfig(), env).master_port == 29401
    assert resolve_hosts(ParallelConfig(master_port=29400), env).master_port == 29400


def test_nnodes_and_node_rank_variables_come_before_torchruns():
    env = {**TORCHRUN_HOST_1, "NNODES": "4", "NODE_RANK": "3"}
    assert resolve_hosts(ParallelConfig(), env) == Hosts(4, 3, "10.0.0.1", 29400)


def test_the_config_wins_over_the_environment():
    p = ParallelConfig(nnodes=2, node_rank=0, master_addr="10.0.0.9", master_port=1234)
    assert resolve_hosts(p, {**TORCHRUN_HOST_1, "NNODES": "4"}) == Hosts(2, 0, "10.0.0.9", 1234)


def test_without_either_a_run_is_one_host_on_loopback():
    assert resolve_hosts(ParallelConfig(), {}) == Hosts(1, 0, "127.0.0.1", 29500)


def test_torchrun_with_several_launchers_per_host_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        resolve_hosts(ParallelConfig(), {**TORCHRUN_HOST_1, "LOCAL_WORLD_SIZE": "8"})
    assert e.value.field == "LOCAL_WORLD_SIZE" and "--nproc-per-node 1" in e.value.rule


def test_a_host_count_from_the_environment_says_so(monkeypatch):
    """A scheduler's WORLD_SIZE that counts GPUs, not hosts, is named as the value's source."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(ConfigError) as e:
        compose(["model=llama3_8b", "load=dummy", "parallel=tp2"])
    assert e.value.field == "parallel.nnodes" and e.value.value == 8
    assert e.value.rule.endswith("(from $WORLD_SIZE; parallel.nnodes overrides it)")


def _fields(overrides: list[str], launching: bool = False) -> list[tuple[str, object]]:
    with pytest.raises(ConfigError) as e:
        compose(["model=llama3_8b", "load=dummy", *overrides], launching=launching)
    return [(x.field, x.value) for x in e.value.errors]


@pytest.mark.parametrize("overrides,field,value", [
    (["parallel=tp2", "parallel.nnodes=3"], "parallel.nnodes", 3),
    (["parallel=tp2", "parallel.nnodes=2", "parallel.node_rank=2"], "parallel.node_rank", 2),
    (["parallel.nnodes=0"], "parallel.nnodes", 0),
    (["parallel=tp2", "parallel.nnodes=2", "parallel.master_port=65534"],
     "parallel.master_port", 65534),
    (["parallel=tp2", "parallel.executor=uniproc"], "parallel.executor", "uniproc"),
    (["parallel.executor=mpi"], "parallel.executor", "mpi"),
    (["parallel.data_parallel_rank=-1"], "parallel.data_parallel_rank", -1),
    (["parallel=dp2", "parallel.data_parallel_rank=1"], "parallel.data_parallel_rank", 1),
    (["parallel=tp2", "parallel.nnodes=2", "parallel.node_rank=1", "job=bench"],
     "parallel.node_rank", 1),
])
def test_inconsistent_hosts_and_executors_name_their_field(overrides, field, value):
    assert (field, value) in _fields(overrides)


def test_replicas_over_several_hosts_are_refused_when_launching():
    assert _fields(["parallel=tp2", "parallel.nnodes=2", "parallel.data_parallel_size=2"],
                   launching=True) == [("parallel.data_parallel_size", 2)]


def test_ray_places_the_ranks_itself_so_hosts_and_replicas_are_refused_by_name():
    """Ray spreads one engine's ranks over its cluster's nodes: nnodes > 1 (set, or torchrun's)
    asks for a second placement, and replicas would each place theirs without the others."""
    assert _fields(["parallel=tp2", "parallel.nnodes=2", "parallel.executor=ray"]) == [
        ("parallel.nnodes", 2)]
    assert _fields(["parallel=tp2", "parallel.data_parallel_size=2", "parallel.executor=ray"]
                   ) == [("parallel.data_parallel_size", 2)]


def test_ray_on_one_host_composes_and_launches():
    cfg = compose(["model=llama3_8b", "load=dummy", "parallel=tp2", "parallel.executor=ray"],
                  launching=True)
    assert cfg.parallel.executor == "ray"


def test_ray_without_the_ray_package_is_refused_by_name(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else find_spec(name, *a))
    assert _fields(["parallel.executor=ray"], launching=True) == [("parallel.executor", "ray")]


def test_replicas_of_several_ranks_compose_and_launch():
    assert compose(["model=llama3_8b", "load=dummy", "parallel=dp2_tp2", "runtime=cpu"],
                        launching=True).parallel.data_parallel_size == 2


def _arch_overrides(arch: str) -> list[str]:
    """A tiny checkpoint's config (tests/engine/checkpoints.py) as hf_config overrides."""
    import transformers

    cls, extra = ALL_ARCHS[arch]
    d = getattr(transformers, cls)(**{**COMMON, **extra}).to_dict()
    keys = ("architectures", "model_type", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "moe_intermediate_size", "num_experts", "num_local_experts",
            "n_routed_experts")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    d["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[d["model_type"]]]
    return [f"+model.hf_config.{k}={v}".replace("'", "") for k, v in d.items()
            if k in keys and v is not None]


@pytest.mark.parametrize("arch", list(ALL_ARCHS))
def test_every_architecture_checks_what_tp_splits(arch):
    """4 heads and MLP / expert widths of 128 or 32: tp=3 divides none of them, tp=2 all."""
    overrides = _arch_overrides(arch)
    widths = {k.rsplit(".", 1)[1]: v for k, v in (o.split("=", 1) for o in overrides)}
    base = ["model=local", "load=dummy", "model.path=null", *overrides]
    compose([*base, "parallel=tp2"])
    with pytest.raises(ConfigError) as e:
        compose([*base, "parallel.tensor_parallel_size=3"])
    rules = [x.rule for x in e.value.errors if x.field == "parallel.tensor_parallel_size"]
    assert "must divide the number of attention heads (4)" in rules
    assert f"must divide the MLP's intermediate size ({widths['intermediate_size']})" in rules
    if "moe_intermediate_size" in widths:
        assert (f"must divide each expert's intermediate size "
                f"({widths['moe_intermediate_size']})") in rules


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3_q_lora"])
def test_expert_parallelism_splits_over_one_replicas_ranks(arch):
    """Experts split whole over the tensor-parallel ranks of one replica; over dp replicas they
    would need DP attention, which is refused by name when launching."""
    base = ["model=local", "load=dummy", "model.path=null", *_arch_overrides(arch),
            "parallel.enable_expert_parallel=true"]
    compose([*base, "parallel=tp2"], launching=True)
    with pytest.raises(ConfigError) as e:
        compose([*base, "parallel=tp2", "parallel.data_parallel_size=2"], launching=True)
    assert "parallel.enable_expert_parallel" in [x.field for x in e.value.errors]


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3_q_lora"])
def test_dp_attention_runs_the_moe_families_with_tp_or_ep_moe(arch):
    """Each rank keeps every head: a tp its 4 heads do not divide is no error under DP
    attention (the experts' widths still split)."""
    base = ["model=local", "load=dummy", "model.path=null", "runtime=cpu",
            *_arch_overrides(arch), "parallel.enable_dp_attention=true"]
    compose([*base, "parallel=tp2"], launching=True)
    compose([*base, "parallel=tp2", "parallel.enable_expert_parallel=true"], launching=True)
    compose([*base, "parallel.tensor_parallel_size=8", "parallel.executor=multiproc"],
            launching=True)
    with pytest.raises(ConfigError, match="must divide the number of attention heads"):
        compose([*base[:-1], "parallel.tensor_parallel_size=8"])


def test_dp_attention_outside_its_layout_is_refused_field_by_field_at_once():
    base = ["model=local", "load=dummy", "model.path=null", "runtime=cpu",
            *_arch_overrides("qwen3_moe"), "parallel.enable_dp_attention=true"]
    assert _dp_rules([*base, "parallel.tensor_parallel_size=1"]) == [
        "parallel.tensor_parallel_size"]
    assert _dp_rules([*base, "parallel=tp2", "parallel.data_parallel_size=2",
                      "specdecode=ngram"]) == ["parallel.data_parallel_size", "specdecode.method"]
    assert _dp_rules([*base, "parallel=tp2", "parallel.executor=ray"]) == ["parallel.executor"]
    assert _dp_rules([*base, "parallel=tp2", "specdecode=ngram"], launching=False) == [], \
        "what the engine cannot run composes (benchmark configs may name it)"


@pytest.mark.parametrize("arch", ["llama", "glm4_moe", "minimax_m2"])
def test_dp_attention_on_another_architecture_is_refused_naming_it(arch):
    overrides = _arch_overrides(arch)
    (name,) = [o.split("=[")[1].rstrip("]") for o in overrides if ".architectures=" in o]
    with pytest.raises(ConfigError) as e:
        compose(["model=local", "load=dummy", "model.path=null", "runtime=cpu", *overrides,
                 "parallel=tp2", "parallel.enable_dp_attention=true"], launching=True)
    (err,) = e.value.errors
    assert err.field == "parallel.enable_dp_attention"
    assert err.rule == (f"not implemented for {name} (built for Qwen3MoeForCausalLM, "
                        "DeepseekV3ForCausalLM)")


def _dp_rules(overrides: list[str], launching: bool = True) -> list[str]:
    """The fields of the broken rules that name DP attention."""
    try:
        compose(overrides, launching=launching)
    except ConfigError as e:
        return [x.field for x in e.errors if "dp_attention" in x.rule]
    return []


@pytest.mark.gpu
def test_more_ranks_than_the_hosts_gpus_are_refused_naming_the_field():
    import torch

    gpus = torch.cuda.device_count()
    assert ("parallel.data_parallel_size", gpus + 1) in _fields(
        [f"parallel.data_parallel_size={gpus + 1}"], launching=True)


def test_the_enable_dp_attention_flag_sets_the_field_and_its_rules_apply():
    import argparse

    from atom.config.flags import add_cli_args, config_from_args

    parser = argparse.ArgumentParser()
    add_cli_args(parser)

    def launch(*argv: str):
        return config_from_args(parser.parse_args(
            ["--model", "tiny_deepseek_v3", "--load-dummy", "zero", "--device", "cpu",
             "--enable-dp-attention", *argv]), launching=True)

    assert launch("-tp", "2").parallel.enable_dp_attention is True
    with pytest.raises(ConfigError) as e:
        launch()
    assert [x.field for x in e.value.errors] == ["parallel.tensor_parallel_size"]
