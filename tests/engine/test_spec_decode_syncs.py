"""On the GPU, a speculative step queues its drafting without waiting for the device: under
torch.cuda.set_sync_debug_mode("error") every call that blocks the host on the stream raises
(a pageable host→device copy such as torch.tensor(list, device="cuda"), .item(), .tolist() of a
device tensor, a blocking copy, torch.cuda.synchronize), and a drafter's propose makes none but
its one read of the kept counts and the drafts (Drafter._read_drafts), for an EAGLE-3 head and
DeepSeek's MTP layer, greedy and sampled (q of sampled drafts, the rejection sampler's inputs),
with CUDA graphs and eager. A verify step's whole launch (its inputs, the target's forward and
sampling, the rejection sampler, the verdict, then the drafting) is held to the same, and waits
on no event either (which the debug mode does not count): the drafting is queued before the
host has read the verify step's tokens (LaunchedStep.result, read after the launch), and the
drafts are read after the launch too (Drafted.read, when the engine resolves the step). With
async scheduling the next verify step is launched before that, on the drafts and kept counts
still on the device: its launch (pending tokens and drafts gathered, positions and slots moved
by the verdict) holds to the same."""
from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest
import torch

from atom import SamplingParams
from tests.engine.checkpoints import add_mtp_layer, local_engine, make_checkpoint
from tests.engine.spec_steps import Overlaps, on_cuda_f32, run, spec_prompts

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
SAMPLED = SamplingParams(temperature=0.8, top_k=20, max_tokens=12, ignore_eos=True, seed=3)


@contextmanager
def _sync_mode(mode: str) -> Iterator[None]:
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


@contextmanager
def _counting_event_waits(counter: list[int]) -> Iterator[None]:
    """Every torch.cuda.Event.synchronize inside counted (a host wait the debug mode lets by)."""
    original = torch.cuda.Event.synchronize

    def counted(event):
        counter[0] += 1
        return original(event)

    torch.cuda.Event.synchronize = counted
    try:
        yield
    finally:
        torch.cuda.Event.synchronize = original


class SyncGuard:
    """Runs every propose, and every launch of a verify step (each token samples: the steps
    after the prompts'), with synchronizing calls raising; the drafts read alone may sync.
    Records per propose whether it had sampling rows and how many reads its drafts took
    (whenever the engine read them), the event waits inside verify launches, and the
    traceback of every sync that raised (the engine core would isolate the step's requests and
    go on)."""

    def __init__(self, runner) -> None:
        self.proposes: list[list] = []  # [had sampling rows, reads]
        self.verify_launches = 0
        self.event_waits = [0]
        self.errors: list[str] = []
        self._reading: list | None = None  # the entry of the propose whose drafts are read
        drafter = runner.drafter
        propose, read, launch = drafter.propose, drafter._read_drafts, runner.launch

        def guarded_propose(reqs, step, kept):
            entry = [bool(step.rows), 0]
            self.proposes.append(entry)
            drafted = self._raising(propose, reqs, step, kept)
            if step.rows:
                drafted.read = self._reading_for(entry, drafted.read)
            return drafted

        def allowed_read(*args):
            assert self._reading is not None, "drafts read outside their Drafted.read"
            self._reading[1] += 1
            with _sync_mode("default"):
                return read(*args)

        def guarded_launch(out):
            if not all(len(r.token_ids) == r.num_sampled for r in out.requests):
                return launch(out)
            self.verify_launches += 1
            with _counting_event_waits(self.event_waits):
                return self._raising(launch, out)

        drafter.propose, drafter._read_drafts, runner.launch = (guarded_propose, allowed_read,
                                                                guarded_launch)

    def _reading_for(self, entry: list, read: Callable) -> Callable:
        def counted():
            self._reading = entry
            try:
                return read()
            finally:
                self._reading = None
        return counted

    def _raising(self, fn: Callable, *args):
        try:
            with _sync_mode("error"):
                return fn(*args)
        except RuntimeError:
            self.errors.append(traceback.format_exc())
            raise


def _eagle3(tmp_path) -> tuple:
    from tests.engine.test_eagle3_spec_decode import TARGET_LAYERS, make_eagle3

    target = make_checkpoint("llama", tmp_path, num_hidden_layers=TARGET_LAYERS)
    return target, ("specdecode=eagle3", f"specdecode.draft_model={make_eagle3(tmp_path)}")


def _mtp(tmp_path) -> tuple:
    return add_mtp_layer(make_checkpoint("deepseek_v3_q_lora", tmp_path)), ("specdecode=mtp",)


@pytest.mark.parametrize("method,graphs,forced", [
    pytest.param(_eagle3, True, (), id="eagle3-graphs"),
    pytest.param(_eagle3, False, (), id="eagle3-eager"),
    pytest.param(_mtp, True, (), id="mtp-graphs"),
    pytest.param(_mtp, False, (), id="mtp-eager"),
    # benchmark 1's: the forced schedule's counts staged at launch, every draft rejected
    pytest.param(_eagle3, True, ("specdecode.acceptance_length=1.0",), id="eagle3-graphs-forced"),
])
def test_a_verify_step_and_its_drafting_make_no_sync_call_but_the_drafts_read(tmp_path, method,
                                                                             graphs, forced):
    path, spec = method(tmp_path)
    mode = (("runtime.enforce_eager=false", "runtime.level=2",
             "runtime.cudagraph_capture_sizes=[1,2,4]") if graphs
            else ("runtime.enforce_eager=true",))
    engine = local_engine(path, "kv_cache.block_size=4", *on_cuda_f32("triton"), *mode, *spec,
                          "specdecode.num_speculative_tokens=3", *forced)
    guard = SyncGuard(engine.core.executor.runner)
    try:
        prompts = spec_prompts()
        outputs = [chunks for params in (GREEDY, SAMPLED)
                   for chunks in (run(engine, prompts[2:3], params)[0]  # batch 1: uniform steps
                                  + run(engine, prompts, params)[0])]  # several lengths
    finally:
        engine.shutdown()
    assert not guard.errors, guard.errors[0]
    assert all(sum(map(len, chunks)) == GREEDY.max_tokens for chunks in outputs)
    assert guard.verify_launches > 0
    assert guard.event_waits == [0]  # the drafting never waited for the verify step's tokens
    assert any(has_rows for has_rows, _ in guard.proposes)
    assert all(reads == (1 if has_rows else 0) for has_rows, reads in guard.proposes)


@pytest.mark.parametrize("method,graphs,forced", [
    pytest.param(_eagle3, True, ("specdecode.acceptance_length=1.0",), id="eagle3-graphs-forced"),
    pytest.param(_eagle3, False, (), id="eagle3-eager"),
    pytest.param(_mtp, True, (), id="mtp-graphs"),
])
def test_an_overlapped_verify_launch_makes_no_sync_call_and_waits_on_no_event(
        tmp_path, method, graphs, forced):
    """Async scheduling on (what a GPU defaults to), greedy rows: every verify step after the
    first is launched before the host has read the step before (Overlaps), and its launch,
    whose pending tokens, drafts, positions, slots and context lengths all come from that
    step's device outputs, neither syncs nor waits on an event."""
    path, spec = method(tmp_path)
    mode = (("runtime.enforce_eager=false", "runtime.level=2",
             "runtime.cudagraph_capture_sizes=[1,2,4]") if graphs
            else ("runtime.enforce_eager=true",))
    engine = local_engine(path, "kv_cache.block_size=4", *on_cuda_f32("triton"), *mode, *spec,
                          "specdecode.num_speculative_tokens=3", "scheduler.async_scheduling=true",
                          *forced)
    guard = SyncGuard(engine.core.executor.runner)
    overlaps = Overlaps(engine)
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    try:
        prompts = spec_prompts()
        outputs = run(engine, prompts[2:3], params)[0] + run(engine, prompts, params)[0]
    finally:
        engine.shutdown()
    assert not guard.errors, guard.errors[0]
    assert all(sum(map(len, chunks)) == params.max_tokens for chunks in outputs)
    assert guard.verify_launches > 0 and guard.event_waits == [0]
    assert overlaps.count >= 0.5 * overlaps.launches
    assert all(reads == (1 if has_rows else 0) for has_rows, reads in guard.proposes)
