"""The CUDA-graph path of speculative steps, run on the CPU: which forward each step replays,
the padded static buffers it replays over and the drafter's graphed catch-up and depths give
the tokens the eager steps give, for n-gram, a draft model and DeepSeek's MTP layer.

Nothing can be captured on a CPU, so `CpuGraph` stands in for torch.cuda.CUDAGraph alone: its
replay runs the very forward a capture records, over the graph's static buffers and static
metadata, into the outputs the capture returned (the Triton kernels interpreted). What a GPU
capture adds, recording itself, is checked by the gpu tests in
tests/engine/test_spec_decode_graphs.py."""
from __future__ import annotations

from collections import Counter
import random
from typing import Any, Callable, Optional

import pytest
import torch

from atom import SamplingParams
from atom.layers.forward_context import ForwardContext
from atom.runner.cuda_graphs import StepGraphs
from atom.runner_builder import step_graphs
from tests.engine.checkpoints import add_mtp_layer, make_checkpoint
from tests.engine.spec_steps import Overlaps, record_graph_choices, record_proposals

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="the GPU captures real graphs: test_spec_decode_graphs")

# Few tokens: every interpreted kernel launch costs milliseconds (a drafter's steps run the
# most kernels: 5 tokens are a prompt step and four verify steps, each with its catch-up).
GREEDY = SamplingParams(temperature=0, max_tokens=7, ignore_eos=True)
DRAFTER_GREEDY = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [9, 10, 11, 12, 9, 10], [20, 21, 22]]
# Every capture runs the forward once: a drafter test's two prompts step at batch 2 only, so it
# captures that size alone (a graph no step reaches would only cost a forward).
PAIR = "runtime.cudagraph_capture_sizes=[2]"


class CpuGraph:
    """A size of a StepGraphs, replayed by running its forward again (see the module doc)."""

    def __init__(self, graphs: StepGraphs, bs: int, replays: Counter) -> None:
        self.graphs, self.bs, self.replays = graphs, bs, replays
        self.out = self._run()

    @torch.inference_mode()
    def _run(self) -> tuple[torch.Tensor, ...]:
        g = self.graphs
        with g.slot.using(ForwardContext(g.meta(self.bs), g.kv_caches, g.kv_scales)):
            return g.forward(*g.args(self.bs))

    def replay(self) -> None:
        self.replays[(self.graphs.name, self.graphs.q_len)] += 1
        for o, new in zip(self.out, self._run()):
            o.copy_(new)


def _engine(path, *overrides: str):
    import atom

    cfg = atom.compose(["model=local", f"model.path={path}", "runtime=cpu",
                        "runtime.kernels=triton", "load.progress_bar=false",
                        "kv_cache.block_size=4", *overrides])
    return cfg, atom.build_engine(cfg)


def _greedy(engine, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    return [o["token_ids"] for o in engine.generate(prompts, params)]


def _eager_then_graphed(path, *overrides: str, prompts: list[list[int]] = PROMPTS,
                        chosen: Optional[list] = None,
                        params: SamplingParams = DRAFTER_GREEDY,
                        watch: Optional[list] = None,
                        before_each: Callable[[Any], None] = lambda runner: None
                        ) -> tuple[list, list, Counter]:
    """One engine's greedy output eager, then with every planned graph attached; the drafts
    a drafter made in both runs must be the same too (greedy output alone would hide wrong
    drafts: they are only rejected). `chosen` collects, per target step of the second run,
    its longest query and whether a graph took it; `watch` the engine's Overlaps;
    `before_each` is handed the runner before each run."""
    cfg, engine = _engine(path, *overrides)
    if watch is not None:
        watch.append(Overlaps(engine))
    runner, replays = engine.core.executor.runner, Counter()
    drafts = record_proposals(runner)
    before_each(runner)
    eager = _greedy(engine, prompts, params)
    eager_drafts = list(drafts)
    for g in step_graphs(cfg, runner, None, 0):
        for bs in g.sizes:
            rec = CpuGraph(g, bs, replays)
            g.graphs[bs] = (rec, rec.out)  # type: ignore[assignment]
    if chosen is not None:
        record_graph_choices(runner, chosen)
    before_each(runner)
    graphed = _greedy(engine, prompts, params)
    assert drafts[len(eager_drafts):] == eager_drafts
    return eager, graphed, replays


@pytest.mark.parametrize("prompts, sizes", [(PROMPTS[:1], "[1]"), (PROMPTS, "[2,4]")],
                         ids=["batch-1", "batch-3"])
def test_ngram_verify_steps_replay_the_graph_of_their_length(tmp_path, prompts, sizes):
    """The model's own repeats give drafts as long as their match: batch 1 replays the graph
    of its length, batch 3's rows of 1, 2 and 3 tokens replay the shortest graph that holds
    the longest (GQA: ragged), padded from 3 sequences to 4, so every step past the prompts'
    replays."""
    path = make_checkpoint("llama", tmp_path)
    chosen: list[tuple[int, bool]] = []
    eager, graphed, replays = _eager_then_graphed(
        path, "specdecode=ngram", "specdecode.num_speculative_tokens=2",
        f"runtime.cudagraph_capture_sizes={sizes}", prompts=prompts, chosen=chosen,
        params=GREEDY)
    assert graphed == eager
    assert replays[("", 2)] > 0, "a verify of one draft (1 + 1 tokens) replays"
    assert replays[("", 1)] > 0
    assert set(replays) <= {("", 1), ("", 2), ("", 3)}
    assert all(hit for longest, hit in chosen if longest <= 3), chosen


def _assert_drafter_steps_replayed(eager, graphed, replays) -> None:
    """Graphed = eager, and the target's verify (1 + 2 tokens), the drafter's catch-up at that
    length and its one-position decode all replayed."""
    assert graphed == eager
    assert replays[("", 3)] > 0
    assert replays[("draft_catch_up", 3)] > 0 and replays[("draft_decode", 1)] > 0


def test_draft_model_steps_replay_the_target_s_and_the_draft_s_graphs(tmp_path):
    target = make_checkpoint("llama", tmp_path, name="t", num_hidden_layers=1)
    draft = make_checkpoint("llama", tmp_path, seed=5, name="d", num_hidden_layers=1)
    eager, graphed, replays = _eager_then_graphed(
        target, "specdecode=draft_model", f"specdecode.draft_model={draft}",
        "specdecode.num_speculative_tokens=2", PAIR, prompts=PROMPTS[1:])
    _assert_drafter_steps_replayed(eager, graphed, replays)


def test_mtp_steps_replay_the_verify_and_the_layer_s_graphs(tmp_path):
    """The MLA layers' absorbed path with 1 + k queries a sequence, captured."""
    path = add_mtp_layer(make_checkpoint("deepseek_v3_q_lora", tmp_path))
    eager, graphed, replays = _eager_then_graphed(
        path, "specdecode=mtp", "specdecode.num_speculative_tokens=2", PAIR,
        prompts=PROMPTS[1:])
    _assert_drafter_steps_replayed(eager, graphed, replays)


def test_eagle3_steps_replay_with_the_aux_states_as_the_target_s_outputs(tmp_path):
    """The head's catch-up reads the aux states out of the target's graph outputs (on a GPU a
    replay runs no hooks, so only those are fresh), staged into its own graph's inputs. Four
    target layers: aux layers 2, 2 and 1."""
    from tests.engine.test_eagle3_spec_decode import make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=4)
    head = make_eagle3(tmp_path)
    eager, graphed, replays = _eager_then_graphed(
        target, "specdecode=eagle3", f"specdecode.draft_model={head}",
        "specdecode.num_speculative_tokens=2", PAIR, prompts=PROMPTS[1:])
    _assert_drafter_steps_replayed(eager, graphed, replays)


def test_overlapped_eagle3_steps_replay_on_moved_positions(tmp_path):
    """Async scheduling forced on: a verify step queued before the step before resolved
    replays the target's graph and the head's on the positions, slots and context lengths the
    device moved, and gives the eager steps' tokens and drafts, which are those of the steps
    resolved one at a time. The forced schedule keeps drafts, so the steps do move (batch 1,
    its draws from one seed in every run: in the same order with and without the overlap)."""
    from tests.engine.test_eagle3_spec_decode import make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=4)
    spec = ("specdecode=eagle3", f"specdecode.draft_model={make_eagle3(tmp_path)}",
            "specdecode.num_speculative_tokens=2", "specdecode.acceptance_length=2.5",
            "runtime.cudagraph_capture_sizes=[1]")
    params = SamplingParams(temperature=0, max_tokens=9, ignore_eos=True)
    reseed = lambda runner: setattr(runner.verify, "_rng", random.Random(4))  # noqa: E731
    _, resolved = _engine(target, *spec, "scheduler.async_scheduling=false")
    reseed(resolved.core.executor.runner)
    want = _greedy(resolved, PROMPTS[1:2], params)
    watch: list[Overlaps] = []
    eager, graphed, replays = _eager_then_graphed(
        target, *spec, "scheduler.async_scheduling=true", prompts=PROMPTS[1:2], watch=watch,
        params=params, before_each=reseed)
    assert eager == want
    _assert_drafter_steps_replayed(eager, graphed, replays)
    assert watch[0].count > 0
