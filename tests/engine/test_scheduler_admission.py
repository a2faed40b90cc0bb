"""Admission keeps room for the running sequences' growth (scheduler.reserve_ratio), so an offline
batch that does not fit at once runs without preemptions, which would recompute whole sequences."""
from __future__ import annotations

from atom.config.compose import compose
from atom.model_engine.scheduler import Scheduler
from atom.model_engine.sequence import Sequence
from atom.sampling_params import SamplingParams


def _scheduler(num_blocks: int, *overrides: str) -> Scheduler:
    cfg = compose(["model=tiny_llama", "load=dummy", "kv_cache.block_size=16",
                   "scheduler.max_num_batched_tokens=256", *overrides])
    return Scheduler(cfg.scheduler, cfg.kv_cache, num_blocks, eos_token_ids={0}, max_model_len=4096)


def _add(sched: Scheduler, n: int, prompt: int, **params) -> None:
    for i in range(n):
        sched.add(Sequence(f"r{i}", [5 + (i * 7 + j) % 90 for j in range(prompt)], SamplingParams(**params)))


def _run(sched: Scheduler) -> int:
    """Every request to the end (token 7, never EOS); returns the tokens computed."""
    computed = 0
    while sched.has_unfinished():
        batch = sched.schedule()
        rows = [i for i, (s, n) in enumerate(zip(batch.seqs, batch.num_new_tokens))
                if s.num_computed_tokens + n >= s.num_tokens]
        computed += batch.total_tokens
        sched.advance(batch, rows)
        sched.resolve(batch, {i: [7] for i in rows})
    assert sched.pools[0].num_free_blocks == 60
    return computed


def test_known_lengths_run_without_preemption():
    """12 requests growing to 160 tokens (10 blocks each) in a 60-block cache: with the reserve
    they run six at a time and never preempt; admitting greedily preempts and recomputes."""
    reserved, greedy = _scheduler(60), _scheduler(60, "scheduler.reserve_ratio=0")
    for s in (reserved, greedy):
        _add(s, 12, prompt=32, max_tokens=128, ignore_eos=True)
    need = 12 * (32 + 128 - 1)
    assert _run(reserved) == need and reserved.num_preempted == 0
    assert _run(greedy) > need and greedy.num_preempted > 0


def test_uncertain_lengths_reserve_the_configured_share():
    """Requests that may stop at EOS reserve reserve_ratio of their remaining max_tokens: 16-token
    prompts and max_tokens=320 at 0.5 expect 176 tokens (11 blocks), so 60 blocks admit 5."""
    sched = _scheduler(60, "scheduler.reserve_ratio=0.5")
    _add(sched, 10, prompt=16, max_tokens=320)
    batch = sched.schedule()
    assert len(batch.seqs) == 5 and len(sched.waiting) == 5
    greedy = _scheduler(60, "scheduler.reserve_ratio=0")
    _add(greedy, 10, prompt=16, max_tokens=320)
    assert len(greedy.schedule().seqs) == 10


def test_a_request_larger_than_the_reserve_still_runs_alone():
    """The first request into an empty engine is admitted whatever it may grow to."""
    sched = _scheduler(60)
    _add(sched, 1, prompt=32, max_tokens=2000, ignore_eos=True)
    assert len(sched.schedule().seqs) == 1
