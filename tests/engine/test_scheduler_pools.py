"""The scheduler under DP attention: one KV pool per rank, each sequence pinned to one of them
at admission, every block of it (allocation, prefix lookup, preemption) from that pool, and the
step's token budget still one for all ranks."""
from __future__ import annotations

from atom.config.compose import compose
from atom.model_engine.scheduler import Scheduler
from atom.model_engine.sequence import Sequence
from atom.sampling_params import SamplingParams


def _scheduler(num_blocks: int, pools: int, *overrides: str) -> Scheduler:
    cfg = compose(["model=tiny_llama", "load=dummy", "kv_cache.block_size=4",
                   "scheduler.max_num_batched_tokens=64", *overrides])
    return Scheduler(cfg.scheduler, cfg.kv_cache, num_blocks, eos_token_ids={0},
                     max_model_len=512, num_pools=pools)


def _seq(name: str, prompt: list[int], max_tokens: int = 8) -> Sequence:
    return Sequence(name, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def _step(sched: Scheduler):
    """One step scheduled, launched and resolved with token 7 for every row that samples."""
    batch = sched.schedule()
    out = batch.output([])
    rows = [i for i, r in enumerate(out.requests) if r.num_sampled]
    sched.advance(batch, rows)
    sched.resolve(batch, {i: [7] for i in rows})
    return out


def test_admission_pins_each_sequence_to_the_pool_with_most_free_blocks():
    sched = _scheduler(8, 2, "scheduler.reserve_ratio=0")
    prompts = {"a": list(range(3, 15)), "b": list(range(3, 7)), "c": list(range(20, 28))}
    for name, p in prompts.items():
        sched.add(_seq(name, p))
    out = _step(sched)
    ranks = {r.request_id: r.rank for r in out.requests}
    # a (3 blocks) to pool 0; b to the emptier pool 1; c (2 blocks) to pool 1 (7 free vs 5)
    assert ranks == {"a": 0, "b": 1, "c": 1}
    tables = {r.request_id: r.block_table for r in out.requests}
    assert tables == {"a": [0, 1, 2], "b": [0], "c": [1, 2]}, "each pool numbers its own blocks"
    assert [p.num_free_blocks for p in sched.pools] == [5, 5]
    assert out.total_tokens == 24, "one token budget for the step, all ranks together"


def test_a_prefix_is_found_only_in_its_ranks_pool():
    sched = _scheduler(16, 2, "kv_cache.enable_prefix_caching=true", "scheduler.reserve_ratio=0")
    shared = list(range(3, 12))  # two full blocks and one token
    sched.add(_seq("first", shared, max_tokens=1))
    _step(sched)
    assert not sched.has_unfinished()
    assert [p.num_free_blocks for p in sched.pools] == [16, 16]
    # pool 0 holds the cached prefix, and as both are empty the next sequence goes there too
    sched.add(_seq("again", shared, max_tokens=1))
    out = _step(sched)
    assert out.requests[0].rank == 0 and out.requests[0].start == 8
    assert (sched.pools[0].hits, sched.pools[1].hits) == (2, 0)


def test_a_preemption_takes_its_victim_from_the_full_pool_only():
    """Pool 0 runs out while the latest running sequence is pool 1's: pool 0's latest is the
    one recomputed (pool 1's, preempted, would free nothing pool 0 needs)."""
    sched = _scheduler(4, 2, "scheduler.reserve_ratio=0")
    for name, prompt, n in (("x", range(3, 11), 8), ("w", range(20, 28), 1),
                            ("y", range(40, 44), 4), ("z", range(50, 54), 3)):
        sched.add(_seq(name, list(prompt), max_tokens=n))
    seqs = {s.request_id: s for s in sched.waiting}
    out = _step(sched)
    assert {r.request_id: r.rank for r in out.requests} == {"x": 0, "w": 1, "y": 0, "z": 1}
    assert [s.request_id for s in sched.running] == ["x", "y", "z"]  # w had its one token
    _step(sched)  # x takes pool 0's last block; y needs one more there
    assert [s.num_preemptions for s in seqs.values()] == [0, 0, 1, 0]
    assert sched.pools[1].num_free_blocks == 3, "z kept its block"
    while sched.has_unfinished():
        _step(sched)
    assert [p.num_free_blocks for p in sched.pools] == [4, 4]
    assert all(s.num_output_tokens == s.params.max_tokens for s in seqs.values())


def test_the_reservation_holds_back_a_sequence_only_in_a_pool_that_runs_others():
    """With every remaining output reserved (reserve_ratio 1), b's 44 possible tokens (11
    blocks) fit no 4-block pool. Beside a running a, one shared pool holds b back; with two,
    b goes to the empty one and is admitted, as an empty engine admits its first sequence."""
    for pools, admitted in ((1, ["a"]), (2, ["a", "b"])):
        sched = _scheduler(4, pools, "scheduler.reserve_ratio=1.0")
        sched.add(Sequence("a", list(range(3, 7)), SamplingParams(max_tokens=3, ignore_eos=True)))
        _step(sched)
        sched.add(Sequence("b", list(range(9, 13)), SamplingParams(max_tokens=40)))
        out = _step(sched)
        assert [r.request_id for r in out.requests] == admitted
        assert [r.rank for r in out.requests] == list(range(pools))
