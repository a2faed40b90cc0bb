"""A drafting plan made before the host knows how many drafts each row kept: from the verdict
on the device, depth j of a row that kept n drafts decodes position b + n + 1 + j (b: its first
sampled input's position) into its own blocks' slot while that position is below its last
block's end and max_model_len; past it the row is dead there (its last slot's position, no KV
written: slot -1), and the host counts only its live depths. The catch-up reads the kept run at
the sampled positions, the prompt's next token after a chunk, and its first drafts at b + n."""
from __future__ import annotations

import pytest
import torch

from atom.kernels.metadata import AttentionMetadata
from atom.runner.host_staging import HostStager
from atom.runner.scheduler_output import ScheduledRequest
from atom.sampling_params import SamplingParams
from atom.spec_decode.draft_plan import DraftPlanner
from atom.spec_decode.drafter import DraftStep, next_tokens
from atom.spec_decode.verdict import judge

BS, MAX_LEN, DECODES = 4, 11, 3
STAGER = HostStager(torch.device("cpu"))


def _step(reqs: list[ScheduledRequest]) -> DraftStep:
    q_lens = [len(r.token_ids) for r in reqs]
    ctx = [r.start + n for r, n in zip(reqs, q_lens)]
    width = max(len(r.block_table) for r in reqs)
    tables = torch.tensor([r.block_table + [-1] * (width - len(r.block_table)) for r in reqs],
                          dtype=torch.int32)
    meta = AttentionMetadata(
        torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32),
        torch.tensor(ctx, dtype=torch.int32), tables, torch.zeros(sum(q_lens), dtype=torch.long),
        max(q_lens), max(ctx), False, q_lens, ctx)
    ids = torch.tensor([t for r in reqs for t in r.token_ids])
    rows = [i for i, r in enumerate(reqs) if r.num_sampled]
    greedy = SamplingParams(temperature=0)
    return DraftStep(ids, torch.zeros_like(ids), meta, torch.zeros(len(ids), 1), rows,
                     [reqs[i].num_sampled for i in rows], [greedy] * len(rows),
                     [None] * len(rows))


REQS = [
    # verifies 3 drafts at positions 5..8; 3 blocks, but max_model_len 11 ends it
    ScheduledRequest("a", 5, [1, 2, 3, 4], [7, 3, 9], 4),
    # a prefill chunk short of the prompt's end: samples nothing, 6 follows it
    ScheduledRequest("b", 0, [8, 8, 8], [5], 0, next_token=6),
    # verifies 3 drafts at positions 3..6 in 2 blocks: its depths end at position 8
    ScheduledRequest("c", 3, [9, 10, 11, 12], [2, 4], 4),
    # a plain decode at position 2
    ScheduledRequest("d", 2, [13], [1], 1),
]


@pytest.mark.parametrize("agree", [(3, 3, 0), (0, 1, 0), (2, 0, 0)])
def test_depths_follow_the_kept_counts_on_the_device_and_end_at_the_rows_last_slot(agree):
    step = _step(REQS)
    counts = step.counts
    drafts = [REQS[row].token_ids[1:] if REQS[row].num_sampled > 1 else [] for row in step.rows]
    # samples that agree with each row's drafts for `agree` positions, then differ
    tokens = [d[j] if j < n else 90 + j for d, m, n in zip(drafts, counts, agree)
              for j in range(m)]
    ends = step.meta.cu_seqlens_q[1:].tolist()
    sampled = torch.tensor([ends[row] - m + j for row, m in zip(step.rows, counts)
                            for j in range(m)])
    verdict = judge(torch.tensor(tokens), counts, step.input_ids, sampled, None, STAGER)
    assert verdict.accepted.tolist() == list(agree)
    plan = DraftPlanner(STAGER, BS, MAX_LEN, 100).plan(REQS, step, verdict, DECODES)
    for i, (row, n) in enumerate(zip(step.rows, agree)):
        req, m = REQS[row], counts[i]
        base = req.start + len(req.token_ids) - m
        limit = min(len(req.block_table) * BS, MAX_LEN)
        assert plan.catch_up.last_idx[i] == ends[row] - m + n
        assert plan.catch_up.last_token[i] == tokens[sum(counts[:i]) + n]
        live = 0
        for j, depth in enumerate(plan.depths):
            pos = base + n + 1 + j
            at = min(pos, limit - 1)
            slot = req.block_table[at // BS] * BS + at % BS if pos < limit else -1
            assert (depth.positions[i], depth.meta.slot_mapping[i],
                    depth.meta.context_lens[i]) == (at, slot, at + 1), (i, j)
            assert depth.meta.max_context_len >= at + 1
            live += pos < limit
        assert plan.live[i] == live
    # the catch-up's next tokens: the kept run at sampled positions, 6 after the chunk
    after = next_tokens(step, plan.catch_up).tolist()
    assert after[6] == 6
    for i, row in enumerate(step.rows):
        first, m, n = ends[row] - counts[i], counts[i], agree[i]
        kept = tokens[sum(counts[:i]):sum(counts[:i]) + n + 1]
        assert after[first:first + m] == [kept[min(j, n)] for j in range(m)]


def test_rows_whose_drafts_run_past_max_model_len_write_no_other_rows_kv(tmp_path, monkeypatch):
    """End to end with a random head: sequences near max_model_len have dead depths (slot -1)
    in steps beside sequences whose depths are all live, and greedy output is the plain output
    token for token for every one of them."""
    from atom.spec_decode.draft_plan import DraftPlan
    from tests.engine.checkpoints import local_engine, make_checkpoint
    from tests.engine.spec_steps import flat, run, spec_prompts
    from tests.engine.test_eagle3_spec_decode import TARGET_LAYERS, make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=TARGET_LAYERS)
    limit = ("model.max_model_len=28", "kv_cache.block_size=4")
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    prompts = spec_prompts()[:3]  # 1, 6 and 19 tokens: they reach 28 at different steps
    plain = local_engine(target, *limit)
    try:
        want = [flat(c) for c in run(plain, prompts, params)[0]]
    finally:
        plain.shutdown()
    plans: list[DraftPlan] = []
    plan = DraftPlanner.plan

    def spied(self, *args):
        plans.append(plan(self, *args))
        return plans[-1]

    monkeypatch.setattr(DraftPlanner, "plan", spied)
    engine = local_engine(target, *limit, "specdecode=eagle3",
                          f"specdecode.draft_model={make_eagle3(tmp_path)}",
                          "specdecode.num_speculative_tokens=4")
    try:
        got = [flat(c) for c in run(engine, prompts, params)[0]]
    finally:
        engine.shutdown()
    assert got == want
    assert [len(p) + len(w) for p, w in zip(prompts, want)] == [28] * 3
    # per plan, whether each of its rows had a dead depth
    dead = [[n < len(p.depths) for n in p.live.tolist()] for p in plans if p.live is not None]
    assert any(any(rows) and not all(rows) for rows in dead)
