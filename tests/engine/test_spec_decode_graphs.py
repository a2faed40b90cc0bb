"""On the GPU, the CUDA graphs of speculative steps give the tokens the eager steps give: the
target's verify graphs (2, 4 for n-gram at k = 3, 1 + k with a runner-side drafter)
and the drafter's catch-up and draft-depth graphs, for n-gram, DeepSeek's MTP layer (MLA's
absorbed path at 1 + k queries, on the Triton kernels), a draft model and an EAGLE-3 head.
float32, as the other GPU speculation tests: bf16 near-ties would make the comparison about
rounding. Each test also checks that the graphs it compares were replayed."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from atom import SamplingParams
from atom.runner.cuda_graphs import StepGraphs
from tests.engine.checkpoints import (add_mtp_layer, local_engine, make_checkpoint,
                                      make_self_drafting_mtp)
from tests.engine.spec_steps import flat, record_graph_choices, record_proposals, run

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
SAMPLED = SamplingParams(temperature=0.8, max_tokens=24, ignore_eos=True, seed=3)


def _prompts() -> list[list[int]]:
    """Repeated random phrases (n-gram finds drafts) beside one that does not repeat."""
    g = torch.Generator().manual_seed(7)
    phrase = lambda n: torch.randint(3, 256, (n,), generator=g).tolist()  # noqa: E731
    return [phrase(8) * 4, phrase(5) * 6 + phrase(3), phrase(11), phrase(2)]


def _engine(path, graphs: bool, *spec: str):
    mode = (("runtime.enforce_eager=false", "runtime.level=2") if graphs
            else ("runtime.enforce_eager=true",))
    return local_engine(path, "kv_cache.block_size=4", "kv_cache.num_blocks=512",
                        "runtime.device=cuda", "runtime.kernels=triton", "model.dtype=float32",
                        "runtime.cudagraph_capture_sizes=[1,2,4]", *mode, *spec)


@pytest.fixture
def replays(monkeypatch) -> Counter:
    """(forward name, query length) → replays, counted in StepGraphs.replay."""
    counts: Counter = Counter()
    replay = StepGraphs.replay

    def counted(self, *args):
        counts[(self.name, self.q_len)] += 1
        return replay(self, *args)

    monkeypatch.setattr(StepGraphs, "replay", counted)
    return counts


def _outputs(engine, params: SamplingParams) -> list[list[int]]:
    """Batch 1 (every step uniform) then the whole batch."""
    prompts = _prompts()
    alone = [flat(c) for c in run(engine, prompts[:1], params)[0]]
    return alone + [flat(c) for c in run(engine, prompts, params)[0]]


def _run(engine, sampled: bool) -> tuple:
    """Greedy (and seeded sampled) outputs, and every set of drafts a drafter made: greedy
    output alone would hide wrong drafts (they are only rejected)."""
    drafts = record_proposals(engine.core.executor.runner)
    out = _outputs(engine, GREEDY), _outputs(engine, SAMPLED) if sampled else None
    engine.shutdown()
    return out, drafts


def _graphed_equals_eager(path, replays: Counter, *spec: str, sampled: bool = False
                          ) -> list[tuple[int, bool]]:
    """Returns the graphed run's (longest query, replayed) per target step."""
    want = _run(_engine(path, False, *spec), sampled)
    graphed = _engine(path, True, *spec)
    runner = graphed.core.executor.runner
    assert runner.graphs is not None and runner.verify_graphs
    chosen: list[tuple[int, bool]] = []
    record_graph_choices(runner, chosen)
    assert _run(graphed, sampled) == want
    return chosen


def test_ngram_verify_graphs_give_eager_tokens(tmp_path, replays):
    """Rows with fewer drafts beside others replay too (GQA: ragged graphs): every step but
    the prompts' is a replay."""
    path = make_checkpoint("llama", tmp_path)
    chosen = _graphed_equals_eager(path, replays, "specdecode=ngram",
                                   "specdecode.num_speculative_tokens=3")
    assert sum(n for (name, q), n in replays.items() if q > 1) > 0
    assert replays[("", 1)] > 0
    assert all(hit for longest, hit in chosen if longest <= 4), chosen


@pytest.mark.parametrize("k", [1, 3])
def test_mtp_graphs_give_eager_tokens(tmp_path, replays, k):
    spec = ("specdecode=mtp", f"specdecode.num_speculative_tokens={k}")
    random = add_mtp_layer(make_checkpoint("deepseek_v3_q_lora", tmp_path))
    _graphed_equals_eager(random, replays, *spec)
    assert replays[("", 1 + k)] > 0
    assert replays[("draft_catch_up", 1 + k)] > 0
    if k > 1:
        assert replays[("draft_decode", 1)] > 0
    self_drafting = make_self_drafting_mtp(tmp_path)
    _graphed_equals_eager(self_drafting, replays, *spec, sampled=True)


def test_draft_model_graphs_give_eager_tokens(tmp_path, replays):
    target = make_checkpoint("llama", tmp_path, name="t")
    draft = make_checkpoint("llama", tmp_path, seed=5, name="d")
    for d in (draft, target):
        _graphed_equals_eager(target, replays, "specdecode=draft_model",
                              f"specdecode.draft_model={d}",
                              "specdecode.num_speculative_tokens=3", sampled=d == target)
    assert replays[("", 4)] > 0
    assert replays[("draft_catch_up", 4)] > 0 and replays[("draft_decode", 1)] > 0


def test_eagle3_graphs_give_eager_tokens(tmp_path, replays):
    """The aux states leave the target's graph as outputs (a replay runs no hooks)."""
    from tests.engine.test_eagle3_spec_decode import TARGET_LAYERS, make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=TARGET_LAYERS)
    head = make_eagle3(tmp_path)
    _graphed_equals_eager(target, replays, "specdecode=eagle3", f"specdecode.draft_model={head}",
                          "specdecode.num_speculative_tokens=3")
    assert replays[("", 4)] > 0
    assert replays[("draft_catch_up", 4)] > 0 and replays[("draft_decode", 1)] > 0
