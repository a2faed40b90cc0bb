"""atom vs transformers on tiny random checkpoints: greedy tokens and last-position logits.

The batch mixes prompt lengths, includes one prompt longer than max_num_batched_tokens (chunked
prefill), and the KV cache is small enough that sequences get preempted and recomputed."""
from __future__ import annotations

import pytest
import torch

import atom
from atom import SamplingParams
from tests.engine.checkpoints import ARCHS, make_checkpoint

MAX_NEW = 12


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {a: make_checkpoint(a, root) for a in ARCHS}


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    lengths = [3, 17, 40, 5, 90, 33, 64, 9]  # 90 > max_num_batched_tokens below
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


def _hf_greedy(path, prompts):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    outs = []
    with torch.no_grad():  # a plain argmax loop: no generation-config rule (EOS masking) in the way
        for p in prompts:
            ids = list(p)
            for _ in range(MAX_NEW):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            outs.append(ids[len(p):])
    return model, outs


def _engine(path, **over):
    args = ["model=local", f"model.path={path}", "runtime=cpu", "load.progress_bar=false",
            "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16"]
    args += [f"{k}={v}" for k, v in over.items()]
    return atom.build_engine(atom.compose(args))


@pytest.mark.parametrize("arch", list(ARCHS))
def test_greedy_tokens_match_transformers(checkpoints, arch):
    prompts = _prompts()
    _, expected = _hf_greedy(checkpoints[arch], prompts)
    # 14 blocks of 16 tokens cannot hold all eight sequences at once, and admission keeps no
    # reserve: forces preemption.
    engine = _engine(checkpoints[arch], **{"kv_cache.num_blocks": 14, "scheduler.reserve_ratio": 0})
    outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True))
    assert [o["token_ids"] for o in outs] == expected
    assert engine.stats().num_preempted_total > 0, "the KV budget was meant to force preemption"


@pytest.mark.parametrize("arch", list(ARCHS))
def test_last_position_logits_match(checkpoints, arch):
    from atom.model_engine.messages import EngineRequest

    prompts = _prompts()[:3]
    model, _ = _hf_greedy(checkpoints[arch], [])
    engine = _engine(checkpoints[arch])
    core = engine.core
    for i, p in enumerate(prompts):
        core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=p,
                                       sampling_params=SamplingParams(temperature=0, max_tokens=1)))
    batch = core.scheduler.schedule()
    inputs = core.executor.runner.prepare(batch.output([]))
    ours = core.executor.runner.forward(inputs.input_ids, inputs.positions, inputs.meta, inputs.logits_idx)
    assert len(inputs.rows) == 3
    with torch.no_grad():
        for r, p in enumerate(prompts):
            ref = model(torch.tensor([p])).logits[0, -1]
            torch.testing.assert_close(ours[r], ref, rtol=1e-4, atol=1e-4)
