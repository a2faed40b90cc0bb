"""The prompt-lookup proposer on hand-made histories, and the proposer a config builds."""
from __future__ import annotations

import pytest

from atom.config.schema import SpecDecodeConfig
from atom.spec_decode.ngram import NgramProposer, propose_ngram
from atom.spec_decode.proposer import PaddedProposer, RunnerDrafts, build_proposer


def test_the_longest_suffix_wins_and_its_latest_occurrence_is_used():
    # suffix [1, 2] occurs at 0 (followed by 3) and at 4 (followed by 9): the latest is used
    assert propose_ngram([1, 2, 3, 4, 1, 2, 9, 9, 1, 2], 2, 1, 3) == [9, 9]
    # the 3-gram [7, 1, 2] occurs earlier (followed by 5): it beats the later 2-gram match
    assert propose_ngram([7, 1, 2, 5, 6, 1, 2, 8, 7, 1, 2], 2, 1, 3) == [5, 6]


def test_fewer_drafts_at_the_end_of_history_and_none_without_a_match():
    assert propose_ngram([4, 5, 6, 4, 5], 4, 1, 2) == [6, 4, 5]
    assert propose_ngram([1, 2, 3, 4], 3, 1, 3) == []
    assert propose_ngram([1, 2, 3, 4], 3, 2, 3) == []
    assert propose_ngram([5], 3, 1, 3) == []


def test_n_min_bounds_the_shortest_lookup():
    history = [1, 9, 2, 3, 9]  # only the 1-gram [9] recurs
    assert propose_ngram(history, 2, 1, 3) == [2, 3]
    assert propose_ngram(history, 2, 2, 3) == []


def test_a_periodic_history_proposes_what_followed_its_latest_period():
    history = [3, 1, 4] * 5  # the latest earlier [3, 1, 4] ends three tokens before the end
    assert propose_ngram(history, 5, 1, 3) == [3, 1, 4]


def test_the_lookback_bounds_the_scan():
    history = [1, 2, 3] + [0] * 50 + [1, 2]
    assert propose_ngram(history, 1, 2, 2) == [3]
    assert propose_ngram(history, 1, 2, 2, lookback=40) == []


def test_forced_acceptance_pads_to_k_drafts():
    cfg = SpecDecodeConfig(method="ngram", num_speculative_tokens=4, acceptance_length=2.0)
    proposer = build_proposer(cfg)
    assert isinstance(proposer, PaddedProposer)
    assert proposer.propose([1, 2, 3, 1, 2], None) == [3, 1, 2, 2]
    assert proposer.propose([1, 2, 3], None) == [3, 3, 3, 3]
    plain = build_proposer(SpecDecodeConfig(method="ngram", num_speculative_tokens=4))
    assert isinstance(plain, NgramProposer) and plain.propose([1, 2, 3], None) == []
    assert build_proposer(SpecDecodeConfig()) is None


@pytest.mark.parametrize("method", ["mtp", "draft_model", "eagle3"])
def test_a_runner_side_proposer_hands_on_what_the_runner_drafted(method):
    """The drafts come with the step's result; under forced acceptance a row the runner
    drafted short for (its blocks ran out) is padded to k like n-gram's."""
    mtp = build_proposer(SpecDecodeConfig(method=method, num_speculative_tokens=3))
    assert isinstance(mtp, RunnerDrafts)
    assert mtp.propose([1, 2, 3], [7, 8, 9]) == [7, 8, 9] and mtp.propose([1, 2], None) == []
    forced = build_proposer(SpecDecodeConfig(method=method, num_speculative_tokens=3,
                                             acceptance_rate=0.81))
    assert forced.propose([1, 2, 3], [7]) == [7, 7, 7]
