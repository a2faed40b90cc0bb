"""A drafter's propose, run on the CPU: its inputs reach the device in one staged copy, it
reads nothing back, and its drafts come back in one read when the engine asks (Drafted.read),
however deep it drafts. On CUDA a `torch.tensor(list,
device=...)` (a pageable copy) or a read of a device value (`.tolist()`, `.item()`, `bool()`,
`int()`, `float()`) waits for the stream, so each one between the depths would hold the host
until the GPU caught up; tests/engine/test_spec_decode_syncs.py counts the waits themselves on
the GPU."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from atom import SamplingParams
from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.spec_steps import run, spec_prompts

READS = ("tolist", "item", "__bool__", "__int__", "__float__")


class ProposeCalls:
    """Per propose that drafted (it had sampling rows), how often it and then the read of its
    drafts called each counted function: the stager's copy, torch.tensor and the reads of a
    tensor's value."""

    def __init__(self, monkeypatch, drafter) -> None:
        self.per_propose: list[Counter] = []
        self.per_read: list[Counter] = []
        self._now: Counter | None = None  # the running propose's counts
        stager, propose = drafter.planner.stager, drafter.propose
        monkeypatch.setattr(stager, "stage", self._counted("stage", stager.stage))
        monkeypatch.setattr(torch, "tensor", self._counted("torch.tensor", torch.tensor))
        for name in READS:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counted(name, original))

        def counted_propose(reqs, step, kept):
            self._now = Counter()
            try:
                drafted = propose(reqs, step, kept)
            finally:
                if step.rows:
                    self.per_propose.append(self._now)
                self._now = None
            if step.rows:
                drafted.read = self._read_counted(drafted.read)
            return drafted

        drafter.propose = counted_propose

    def _read_counted(self, read):
        def counted():
            self._now = Counter()
            try:
                return read()
            finally:
                self.per_read.append(self._now)
                self._now = None
        return counted

    def _counted(self, name: str, fn):
        def counted(*args, **kwargs):
            if self._now is not None:
                self._now[name] += 1
            return fn(*args, **kwargs)
        return counted


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_propose_stages_its_inputs_once_and_reads_its_drafts_once(tmp_path, monkeypatch,
                                                                    temperature):
    from tests.engine.test_eagle3_spec_decode import TARGET_LAYERS, make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=TARGET_LAYERS)
    engine = local_engine(target, "kv_cache.block_size=4", "runtime.kernels=torch",
                          "specdecode=eagle3", f"specdecode.draft_model={make_eagle3(tmp_path)}",
                          "specdecode.num_speculative_tokens=4")
    calls = ProposeCalls(monkeypatch, engine.core.executor.runner.drafter)
    params = SamplingParams(temperature=temperature, max_tokens=10, ignore_eos=True, seed=5)
    try:
        run(engine, spec_prompts()[1:3], params)
    finally:
        engine.shutdown()
    assert len(calls.per_propose) >= 3 and len(calls.per_read) == len(calls.per_propose)
    for counts in calls.per_propose:
        reads = sum(counts[name] for name in READS)
        assert (counts["stage"], counts["torch.tensor"], reads) == (1, 0, 0), counts
    for counts in calls.per_read:
        reads = sum(counts[name] for name in READS)
        assert (counts["stage"], counts["torch.tensor"], reads) == (0, 0, 1), counts


@pytest.mark.parametrize("forced", [(), ("specdecode.acceptance_length=1.0",)],
                         ids=["exact", "forced"])
def test_a_drafting_launch_reads_nothing_of_its_step_before_the_drafts(tmp_path, monkeypatch,
                                                                       forced):
    """The drafting is queued on the verify step's device verdict: inside a launch the step's
    tokens are never resolved (on CUDA, an event wait before the drafting's launches); the core
    reads them after the launch, under exact match and under the forced schedule alike."""
    from atom.runner.launched_step import LaunchedStep
    from tests.engine.test_eagle3_spec_decode import TARGET_LAYERS, make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=TARGET_LAYERS)
    engine = local_engine(target, "kv_cache.block_size=4", "runtime.kernels=torch",
                          "specdecode=eagle3", f"specdecode.draft_model={make_eagle3(tmp_path)}",
                          "specdecode.num_speculative_tokens=3", *forced)
    runner = engine.core.executor.runner
    inside, launching, after = [0], [False], [0]
    launch, result = runner.launch, LaunchedStep.result

    def counted_result(step):
        inside[0] += launching[0]
        after[0] += not launching[0]
        return result(step)

    def counted_launch(out):
        launching[0] = True
        try:
            return launch(out)
        finally:
            launching[0] = False

    monkeypatch.setattr(LaunchedStep, "result", counted_result)
    runner.launch = counted_launch
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    try:
        outputs, _ = run(engine, spec_prompts()[1:3], params)
    finally:
        engine.shutdown()
    assert inside == [0] and after[0] > 0
    assert all(sum(map(len, chunks)) == params.max_tokens for chunks in outputs)
