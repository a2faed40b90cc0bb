"""The verify step's outcome decided on the device (spec_decode/verdict.py) is the host's: the
drafts each row keeps are accept_drafts' under exact match and the forced schedule's draws under
forced acceptance, and the token kept after each sampled position is the run's (the last kept
one past a rejection), the catch-up's input there."""
from __future__ import annotations

import random

import torch

from atom.runner.host_staging import HostStager
from atom.runner.launched_step import accept_drafts
from atom.spec_decode.acceptance import ForcedAcceptance, forced_counts
from atom.spec_decode.verdict import judge

STAGER = HostStager(torch.device("cpu"))


def _batch(rng: random.Random, rows: int) -> tuple[list[int], list[list[int]], list[int]]:
    """Ragged rows (plain decodes among verifies) whose samples agree with their drafts for a
    random prefix, so every kept length occurs."""
    counts, drafts, tokens = [], [], []
    for _ in range(rows):
        m = rng.choice([1, 2, 4, 8])
        d = [rng.randrange(50) for _ in range(m - 1)]
        agree = rng.randrange(m)
        t = [d[j] if j < agree else rng.randrange(50) for j in range(m - 1)]
        counts.append(m)
        drafts.append(d)
        tokens += t + [rng.randrange(50)]
    return counts, drafts, tokens


def _judge(tokens: list[int], counts: list[int], drafts: list[list[int]], forced=None):
    """Each row's inputs as a verify step has them: its last token (any), then its drafts,
    every one a sampled position."""
    ids = torch.tensor([t for d in drafts for t in [0, *d]])
    return judge(torch.tensor(tokens), counts, ids, torch.arange(len(ids)), forced, STAGER)


def _kept_after(kept: list[int], m: int) -> list[int]:
    """What the catch-up reads at a row's m sampled positions: the kept run, then its last."""
    return [kept[min(j, len(kept) - 1)] for j in range(m)]


def test_exact_match_on_the_device_keeps_what_accept_drafts_keeps():
    rng = random.Random(0)
    for _ in range(20):
        counts, drafts, tokens = _batch(rng, rows=6)
        v = _judge(tokens, counts, drafts)
        want, p, after = [], 0, []
        for m, d in zip(counts, drafts):
            kept = accept_drafts(tokens[p:p + m], d)
            want.append(kept)
            after += _kept_after(kept, m)
            p += m
        assert v.accepted.tolist() == [len(k) - 1 for k in want]
        assert v.last.tolist() == [k[-1] for k in want]
        assert v.kept.tolist() == after
        assert v.drafts.tolist() == [t for d in drafts for t in [*d, -1]]


def test_forced_counts_on_the_device_are_the_schedules_draws_in_row_order():
    rng = random.Random(1)
    on_device, on_host = ForcedAcceptance(3.5, 7, seed=4), ForcedAcceptance(3.5, 7, seed=4)
    for _ in range(20):
        counts, drafts, tokens = _batch(rng, rows=5)
        forced = forced_counts(on_device, [m - 1 for m in counts])
        v = _judge(tokens, counts, drafts, forced)
        p, want, after = 0, [], []
        for m, d in zip(counts, drafts):
            kept = on_host(tokens[p:p + m], d) if d else tokens[p:p + m]
            want.append(kept)
            after += _kept_after(kept, m)
            p += m
        assert v.accepted.tolist() == [len(k) - 1 for k in want]
        assert v.kept.tolist() == after
        assert v.last.tolist() == [k[-1] for k in want]


def test_exact_match_draws_nothing_from_the_schedule():
    assert forced_counts(accept_drafts, [3, 0, 2]) is None
