"""Steps through the executor boundary: a serializable SchedulerOutput in, tokens per request out;
and multi-token steps, where a decoding sequence verifies k draft tokens in one step and keeps
1 + the accepted ones.

The drafts here come from the test, standing in for a proposer: the greedy continuation itself
(every draft accepted), a wrong guess (none accepted), or a mix. Whatever the drafts, greedy
output must be the plain one-token-per-step output; right drafts must take fewer steps.
"""
from __future__ import annotations

import msgspec
import pytest
import torch

from atom import SamplingParams
from atom.model_engine.messages import EngineRequest
from atom.runner.scheduler_output import SchedulerOutput
from atom.runner.launched_step import accept_drafts
from tests.engine.checkpoints import make_checkpoint, local_engine

MAX_TOKENS = 14
# Drafts are verified only after the step before has resolved: a proposer needs its last token.
SYNC = ("scheduler.async_scheduling=false",)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("multitoken"))


def _engine(path, *extra: str):
    return local_engine(path, "kv_cache.block_size=4", *extra)


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 256, (k,), generator=g).tolist() for k in (6, 13, 9)]


def _run_with_drafts(engine, prompts, reference, guess) -> tuple[list[list[int]], int]:
    """Steps the core by hand; before each step every decoding sequence gets the drafts
    `guess(tokens so far, reference continuation)` proposes."""
    core = engine.core
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for i, p in enumerate(prompts):
        core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=p,
                                       sampling_params=greedy))
    got = {str(i): [] for i in range(len(prompts))}
    steps = 0
    while core.has_unfinished():
        for seq in core.scheduler.running:
            if seq.num_computed_tokens == seq.num_tokens - 1 and seq.token_ids[-1] >= 0:
                out = seq.output_token_ids
                seq.spec_token_ids = guess(out, reference[int(seq.request_id)])
        for o in core.step():
            got[o.request_id] += o.new_token_ids
        steps += 1
    s = core.stats()
    assert s.kv_blocks_free == s.kv_blocks_total
    return [got[str(i)] for i in range(len(prompts))], steps


def test_verify_steps_keep_greedy_output_and_save_steps(ckpt):
    prompts = _prompts()
    plain = _engine(ckpt)
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    reference = [o["token_ids"] for o in plain.generate(prompts, greedy)]
    engine = _engine(ckpt, *SYNC)  # one engine for every run: each ends with nothing held
    _, plain_steps = _run_with_drafts(engine, prompts, reference, lambda out, ref: [])

    right = lambda out, ref: ref[len(out):len(out) + 3]  # noqa: E731  (three correct drafts)
    wrong = lambda out, ref: [(t + 1) % 256 for t in ref[len(out):len(out) + 2]]  # noqa: E731
    half = lambda out, ref: ref[len(out):len(out) + 1] + [0]  # noqa: E731  (one right, one wrong)
    for name, guess in (("right", right), ("wrong", wrong), ("half", half)):
        tokens, steps = _run_with_drafts(engine, prompts, reference, guess)
        assert tokens == reference, name
        if name == "right":
            assert steps < plain_steps - 5, (steps, plain_steps)


def test_a_two_token_verify_step_through_the_executor(ckpt):
    """One verify step by hand: the sequence feeds its last token and one draft; the executor
    returns the tokens kept (the draft's own check and the one after it)."""
    prompt = _prompts()[0]
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    reference = _engine(ckpt).generate([prompt], greedy)[0]["token_ids"]
    core = _engine(ckpt, *SYNC).core
    core.add_request(EngineRequest(request_id="a", prompt_token_ids=prompt, sampling_params=greedy))
    assert core.step()[0].new_token_ids == reference[:1]  # the prefill samples the first token
    seq = core.seqs["a"]
    seq.spec_token_ids = [reference[1]]
    batch = core.scheduler.schedule()
    assert batch.num_new_tokens == [2] and batch.drafts == {0: [reference[1]]}
    out = batch.output([])
    assert out.requests[0].token_ids == [reference[0], reference[1]]
    assert out.requests[0].num_sampled == 2
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(out), type=SchedulerOutput)
    assert wire == out  # nothing in a step is a live object: it can cross to another process
    launched = core.executor.execute(wire)
    core.scheduler.advance(batch, launched.rows)
    sampled, _ = launched.result()
    assert sampled == {0: reference[1:3]}
    core.scheduler.resolve(batch, sampled)
    assert seq.output_token_ids == reference[:3]
    assert seq.num_computed_tokens == len(prompt) + 2  # the last kept token is not computed yet


def test_accept_drafts_keeps_the_matching_prefix_and_the_token_after_it():
    assert accept_drafts([5, 6, 7, 8], [5, 6, 7]) == [5, 6, 7, 8]
    assert accept_drafts([5, 6, 7, 8], [5, 9, 7]) == [5, 6]
    assert accept_drafts([5, 6], [4]) == [5]
    assert accept_drafts([5], []) == [5]
