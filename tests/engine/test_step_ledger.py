"""The multi-process executor's books of its steps (atom/executor/step_ledger.py), fed the
messages ranks send: answers land on the right step around a step whose launch raised; a step
raised on every rank is a StepRaised for the engine to isolate; one raised on some ranks only is
the end of the engine, whichever rank speaks first. (The whole path runs on two gloo ranks in
test_request_isolation.py; a rank raising alone cannot be made to happen there.)"""
from __future__ import annotations

import pytest

from atom.executor.step_ledger import RanksOutOfStep, StepLedger
from atom.executor.worker_ipc import Launched, StepResult


def _answer(token: int) -> StepResult:
    return StepResult({0: [token]}, {})


def test_answers_skip_a_step_whose_launch_raised():
    books = StepLedger()
    # rank 0 launches 1, launches 2 and answers 1, raises 3 and answers 2, launches 4, answers 4
    for msg in (Launched(0, 1), Launched(0, 2), _answer(10), Launched(0, 3, "boom"),
                Launched(1, 3, "boom"), _answer(20), Launched(0, 4), _answer(40)):
        books.take(msg)
    assert books.launched(3) == (True, "boom")
    assert books.raised_everywhere(3, world_size=2)
    assert books.result(1).sampled == {0: [10]} and books.result(2).sampled == {0: [20]}
    assert books.result(4).sampled == {0: [40]}
    assert books.launched(4) == (False, None)  # asked about, then dropped


def test_a_step_that_raised_on_rank_0_waits_for_the_others():
    books = StepLedger()
    books.take(Launched(0, 1, "boom"))
    assert not books.raised_everywhere(1, world_size=3)
    books.take(Launched(2, 1, "boom"))
    assert not books.raised_everywhere(1, world_size=3)
    books.take(Launched(1, 1, "boom"))
    assert books.raised_everywhere(1, world_size=3)


@pytest.mark.parametrize("rank1_first", [True, False])
def test_a_step_raised_on_another_rank_only_is_out_of_step(rank1_first):
    books = StepLedger()
    first, second = Launched(1, 1, "boom"), Launched(0, 1)
    if not rank1_first:
        first, second = second, first
    books.take(first)
    with pytest.raises(RanksOutOfStep, match="step 1 raised on ranks \\[1\\] but not on rank 0"):
        books.take(second)


def test_a_late_word_from_another_rank_after_rank_0_answered_is_out_of_step():
    books = StepLedger()
    for msg in (Launched(0, 1), Launched(0, 2), _answer(10)):
        books.take(msg)
    assert books.result(1) is not None
    with pytest.raises(RanksOutOfStep):
        books.take(Launched(1, 1, "boom"))
