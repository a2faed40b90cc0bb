"""Forced acceptance: the spec's earliest-positions schedule, unit and end to end."""
from __future__ import annotations

import pytest
import torch

import atom
from atom import SamplingParams
from atom.config.schema import SpecDecodeConfig
from atom.spec_decode.acceptance import ForcedAcceptance, forced_length, position_schedule
from atom.spec_decode.stats import average_tokens_per_forward, per_position_acceptance
from tests.engine.checkpoints import make_checkpoint


def test_the_schedule_spends_the_budget_on_the_earliest_positions():
    assert position_schedule(3.78, 7) == pytest.approx([1, 1, 0.78, 0, 0, 0, 0])
    assert position_schedule(1.0, 3) == [0, 0, 0]
    assert position_schedule(4.0, 3) == [1, 1, 1]
    rate = SpecDecodeConfig(method="ngram", num_speculative_tokens=4, acceptance_rate=0.5)
    assert forced_length(rate) == 3.0
    assert forced_length(SpecDecodeConfig(method="ngram")) is None


def test_accepted_drafts_are_kept_as_proposed_and_the_next_token_is_the_targets():
    force = ForcedAcceptance(3.0, 4, seed=0)
    sampled, drafts = [10, 11, 12, 13, 14], [20, 21, 22, 23]
    assert force(sampled, drafts) == [20, 21, 12]
    assert force(sampled[:2], drafts[:1]) == [20, 11]  # fewer drafts than the schedule keeps


def test_the_accepted_length_distribution_is_the_schedules():
    force = ForcedAcceptance(3.78, 7, seed=1)
    counts = [len(force(list(range(8)), list(range(100, 107)))) - 1 for _ in range(4000)]
    assert set(counts) == {2, 3}
    assert sum(c == 3 for c in counts) / len(counts) == pytest.approx(0.78, abs=0.03)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("forced"))


@pytest.mark.parametrize("override,length", [("specdecode.acceptance_length=3.78", 3.78),
                                             ("specdecode.acceptance_rate=0.25", 2.75)])
def test_realized_acceptance_matches_the_request_over_2000_drafts(ckpt, override, length, capsys):
    engine = atom.build_engine(atom.compose([
        "model=local", f"model.path={ckpt}", "runtime=cpu", "load.progress_bar=false",
        "specdecode=ngram", "specdecode.num_speculative_tokens=7", override]))
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 256, (9,), generator=g).tolist() for _ in range(8)]
    engine.generate(prompts, SamplingParams(temperature=0, max_tokens=160, ignore_eos=True))
    s = engine.stats()
    assert s.spec_draft_tokens >= 2000
    assert average_tokens_per_forward(s) == pytest.approx(length, rel=0.02)
    want = position_schedule(length, 7)
    got = per_position_acceptance(s)
    for j, p in enumerate(want):
        if p in (0.0, 1.0):
            assert got[j] == p, (j, got)  # the schedule's certain slots are exact
        else:
            assert got[j] == pytest.approx(p, abs=0.06), (j, got)
    engine.print_mtp_statistics()
    printed = capsys.readouterr().out
    assert printed.startswith("MTP Statistics:\n")
    assert f"Total draft tokens: {s.spec_draft_tokens}\n" in printed
