"""Two models in one process, each on its own kernel backend, stepped in turn: what a model
reads at run time (its backend, its ranks, its forward context) is its own, so each gives
exactly the tokens it gives alone. A draft model beside its target (#22) needs no more."""
from __future__ import annotations

import pytest

from atom.sampling_params import SamplingParams
from tests.engine.checkpoints import local_engine, make_checkpoint

PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 13]]
# Seeded: each request samples from its own generator, not the process's torch RNG that both
# engines draw from.
PARAMS = [SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
          SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=8, ignore_eos=True)]
MODELS = {"llama": "torch", "qwen3": "cpu"}  # checkpoint → kernel backend


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_models")
    return {arch: make_checkpoint(arch, root) for arch in MODELS}


def _engine(checkpoints, arch: str):
    return local_engine(checkpoints[arch], f"runtime.kernels={MODELS[arch]}")


def _alone(checkpoints, arch: str) -> list[list[int]]:
    engine = _engine(checkpoints, arch)
    try:
        return [out["token_ids"] for out in engine.generate(PROMPTS, PARAMS)]
    finally:
        engine.shutdown()


def test_two_models_on_different_backends_interleaved_give_their_own_tokens(checkpoints):
    want = {arch: _alone(checkpoints, arch) for arch in MODELS}
    engines = {arch: _engine(checkpoints, arch) for arch in MODELS}
    try:
        for arch, engine in engines.items():
            model = engine.core.executor.runner.model
            assert model.context.backend.name == MODELS[arch]
            kept = {id(m.backend) for m in model.modules() if hasattr(m, "backend")}
            assert kept == {id(model.context.backend)}, "every layer runs its model's backend"
        ids = {arch: engine.add_request(PROMPTS, PARAMS) for arch, engine in engines.items()}
        got: dict[str, dict[str, list[int]]] = {arch: {} for arch in MODELS}
        while not all(engine.is_finished() for engine in engines.values()):
            for arch, engine in engines.items():  # one step of each, in turn
                for out in engine.step():
                    got[arch][out["request_id"]] = out["token_ids"]
        for arch in MODELS:
            assert [got[arch][i] for i in ids[arch]] == want[arch], arch
    finally:
        for engine in engines.values():
            engine.shutdown()

