"""The LLMEngine surface of the spec: add_request + step + is_finished with a stream callback,
output dicts, LLMEngine(model=..., **kwargs), dummy weights, sharded checkpoints."""
from __future__ import annotations

import json

import pytest
import torch

import atom
from atom import LLMEngine, SamplingParams
from tests.engine.checkpoints import make_checkpoint

KEYS = {"text", "token_ids", "latency", "finish_reason", "num_tokens_input", "num_tokens_output",
        "ttft", "tpot"}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("api"))


def test_add_request_step_and_stream_callback(ckpt):
    engine = LLMEngine(model=str(ckpt), device="cpu", kernels="torch", enforce_eager=True)
    seen: dict[str, list[int]] = {}
    engine.add_request([[5, 6, 7], [8, 9]], SamplingParams(temperature=0.8, max_tokens=6, ignore_eos=True),
                       stream_callback=lambda out: seen.setdefault(out.request_id, []).extend(out.token_ids))
    done = []
    while not engine.is_finished():
        done.extend(engine.step())
    assert len(done) == 2
    for out in done:
        assert KEYS <= out.keys()
        assert out["num_tokens_output"] == 6 and out["finish_reason"] == "length"
        assert seen[out["request_id"]] == out["token_ids"]
        assert out["latency"] >= out["ttft"] > 0


@pytest.mark.parametrize("kind", ["zero", "xavier", "empty"])
def test_dummy_weights_run_without_a_checkpoint(kind):
    engine = atom.build_engine(atom.compose(["model=tiny_llama", f"load.dummy={kind}", "runtime=cpu"]))
    w = engine.core.executor.runner.model.model.layers[0].mlp.down_proj.weight
    if kind == "zero":
        assert torch.count_nonzero(w) == 0
    if kind == "xavier":
        assert w.std() > 0
    out = engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert out[0]["num_tokens_output"] == 3


def test_sharded_checkpoint_loads_like_the_single_file(ckpt, tmp_path):
    from transformers import AutoModelForCausalLM

    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(ckpt).save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").exists()
    assert len(json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]) > 1
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    a = LLMEngine(model=str(ckpt), device="cpu").generate([[3, 4, 5, 6]], params)
    b = LLMEngine(model=str(sharded), device="cpu").generate([[3, 4, 5, 6]], params)
    assert a[0]["token_ids"] == b[0]["token_ids"]


@pytest.mark.parametrize("override,field,rule", [
    ("parallel=dp2", "parallel.data_parallel_size", "2: replicas run behind the server"),
    ("parallel.enable_dp_attention=true", "parallel.tensor_parallel_size",
     "1: enable_dp_attention spreads the sequences"),
    ("specdecode=mtp", "specdecode.method", "'mtp': the model has no next-n \\(MTP\\) layers")])
def test_a_setting_the_engine_cannot_run_is_refused_before_weights_load(override, field, rule,
                                                                        monkeypatch):
    """dp above 1 and MTP on a model without next-n layers compose (benchmark configs name them)
    but the model engine cannot run them: it must say so, naming the field, rather than run as
    if they had not been asked for."""
    from atom.config.errors import ConfigError
    from atom.model_engine import engine_core

    monkeypatch.setattr(engine_core.EngineCore, "__init__",
                        lambda *a, **k: pytest.fail("the core (and its weights) was built"))
    cfg = atom.compose(["model=tiny_llama", "load=dummy", "runtime=cpu", override])
    with pytest.raises(ConfigError, match=f"{field}={rule}"):
        atom.build_engine(cfg)
