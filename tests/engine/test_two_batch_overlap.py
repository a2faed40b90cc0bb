"""Two-batch overlap (runtime.two_batch_overlap): a step mixing decodes with prefill chunks, run as
two halves stage by stage, gives the plain forward's hidden states and the engine's greedy tokens.
On CPU the halves run one after the other (the triton backend and the side stream are tested in
tests/kernels/test_two_batch_triton.py)."""
from __future__ import annotations

import argparse

import pytest
import torch

import atom
from atom import SamplingParams
from atom.config.compose import compose
from atom.config.flags import ENGINE_FLAGS, add_cli_args, overrides_from_args
from atom.config.validate import ConfigError
from atom.kernels.backend import get_backend
from atom.kernels.metadata import AttentionMetadata
from atom.loader.model_loader import build_model
from atom.models.hf_config import load_hf_config
from atom.runner import forward_context
from atom.runner.two_batch import two_batch_forward
from tests.engine.checkpoints import make_checkpoint
from tests.engine.stepping import SteppedBatch

CPU = torch.device("cpu")

# Decodes first, then a prefill chunk; then decodes after a prefill inside the tail.
MIXED = {"decodes_then_prompt": {0: 1, 1: 1, 2: 1, 3: 1, 4: 6},
         "tail_mixes_again": {0: 1, 1: 1, 2: 5, 3: 1, 4: 3}}


def _model(name: str) -> torch.nn.Module:
    cfg = compose([f"model={name}", "load=dummy", "runtime=cpu"])
    forward_context.set_backend(get_backend("torch"))
    return build_model(cfg, load_hf_config(cfg), CPU, torch.float32)


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
@pytest.mark.parametrize("shape", list(MIXED))
def test_halves_give_the_plain_forward(name, shape):
    model = _model(name)
    batch = SteppedBatch(model, 5)
    g = torch.Generator().manual_seed(1)
    tokens = lambda n: torch.randint(3, model.hf_config.vocab_size, (n,), generator=g).tolist()
    batch.step(model, {0: tokens(7), 1: tokens(3), 2: tokens(12), 3: tokens(1)})
    ids, pos, meta = batch.prepare({s: tokens(n) for s, n in MIXED[shape].items()})
    head, tail = meta.split_decode_head()
    with torch.inference_mode():
        with forward_context.forward_context(batch.context(meta)):
            plain = model(ids, pos)
        halves = two_batch_forward(model.model, ids, pos, head.num_seqs, batch.context(head),
                                   batch.context(tail))
    torch.testing.assert_close(halves, plain, rtol=1e-5, atol=1e-5)


def test_split_decode_head_views_copies_and_counters():
    q_lens, ctx = [1, 1, 4, 1], [9, 5, 7, 3]
    meta = AttentionMetadata(torch.tensor([0, 1, 2, 6, 7], dtype=torch.int32),
                             torch.tensor(ctx, dtype=torch.int32), torch.arange(12, dtype=torch.int32).view(4, 3),
                             torch.arange(7, dtype=torch.int64), 4, 9, False, q_lens, ctx,
                             num_decode_seqs=2, split_counters=torch.zeros(16, dtype=torch.int32))
    tail_counters = torch.zeros(16, dtype=torch.int32)
    head, tail = meta.split_decode_head(tail_counters)
    assert head.num_seqs == 2 and head.is_decode and head.split_counters is meta.split_counters
    assert head.block_tables.data_ptr() == meta.block_tables.data_ptr()  # views from offset 0
    assert tail.cu_seqlens_q.tolist() == [0, 4, 5] and tail.slot_mapping.tolist() == [2, 3, 4, 5, 6]
    assert tail.context_lens.tolist() == [7, 3] and tail.q_lens_cpu == [4, 1]
    assert tail.max_q_len == 4 and not tail.is_decode and tail.num_decode_seqs == 0
    assert tail.block_tables.data_ptr() != meta.block_tables[2].data_ptr()  # a copy: aligned
    assert tail.split_counters is tail_counters


def test_config_field_and_flag():
    p = argparse.ArgumentParser()
    add_cli_args(p, ENGINE_FLAGS)
    flags = overrides_from_args(p.parse_args(["--enable-two-batch-overlap"]), ENGINE_FLAGS)
    cfg = compose(["model=tiny_llama", "load=dummy", *flags])
    assert cfg.runtime.two_batch_overlap is True and cfg.runtime.two_batch_min_decodes == 32
    with pytest.raises(ConfigError, match="runtime.two_batch_min_decodes"):
        compose(["model=tiny_llama", "load=dummy", "runtime.two_batch_min_decodes=0"])
    with pytest.raises(ConfigError, match="runtime.two_batch_carveout"):
        compose(["model=tiny_llama", "load=dummy", "runtime.two_batch_carveout=-1"])


def test_a_zero_carveout_touches_no_global_setting():
    from atom.runner.two_batch import gemms_leave_sms

    before = torch._C._get_sm_carveout_experimental()
    with gemms_leave_sms(0):
        assert torch._C._get_sm_carveout_experimental() == before
    assert torch._C._get_sm_carveout_experimental() == before


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("tbo"))


def staggered_greedy(path, overlap: bool, *extra: str) -> tuple[list, int]:
    """Greedy tokens of staggered requests (a 40-token budget per step keeps steps mixed), and
    how many steps ran as two halves."""
    engine = atom.build_engine(atom.compose([
        "model=local", f"model.path={path}", "load.progress_bar=false", "kv_cache.block_size=16",
        "scheduler.max_num_batched_tokens=40", "runtime.two_batch_min_decodes=1",
        f"runtime.two_batch_overlap={str(overlap).lower()}", *extra]))
    split = 0
    runner = engine.core.runner
    if runner.two_batch is not None:
        forward = runner.two_batch.forward

        def counting(*args, **kw):
            nonlocal split
            split += 1
            return forward(*args, **kw)
        runner.two_batch.forward = counting
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 256, (k,), generator=g).tolist() for k in (3, 17, 40, 5, 33, 9)]
    outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
    s = engine.stats()
    assert s.kv_blocks_free == s.kv_blocks_total
    return [o["token_ids"] for o in outs], split


def test_engine_tokens_equal_with_and_without(ckpt):
    """The torch reference backend on CPU; tests/kernels/test_two_batch_triton.py runs the triton
    backend (interpreted on CPU, on two streams on a GPU)."""
    if torch.cuda.is_available():
        pytest.skip("CPU only")
    plain, _ = staggered_greedy(ckpt, False, "runtime=cpu", "runtime.kernels=torch")
    halves, split = staggered_greedy(ckpt, True, "runtime=cpu", "runtime.kernels=torch")
    assert split > 0, "no step ran as two halves"
    assert halves == plain


class _Stream:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: "_Stream") -> None:
        self.log.append(("wait", self.name, other.name))


class _Recorder(torch.nn.Module):
    """A stand-in decoder whose stages log (half, stage, stream): half a has 3 tokens, b has 2."""

    def __init__(self, log: list, layers: int, current) -> None:
        super().__init__()
        self.log, self.current = log, current
        self.layers = [self._layer(i) for i in range(layers)]

    def _note(self, x: torch.Tensor, stage: str) -> None:
        self.log.append(("a" if x.shape[0] == 3 else "b", stage, self.current()))

    def embed_tokens(self, ids):
        return ids.float()[:, None]

    def norm(self, x, residual):
        self._note(x, "norm")
        return x, None

    def _layer(self, i: int):
        rec = self

        class Layer:
            class self_attn:
                @staticmethod
                def attend(pos, qkv):
                    rec._note(qkv, f"attend{i}")
                    return qkv

            @staticmethod
            def project_qkv(x, residual):
                rec._note(x, f"qkv{i}")
                return x, x

            @staticmethod
            def finish(attn, residual):
                rec._note(attn, f"finish{i}")
                return attn, residual
        return Layer


def test_each_half_attends_while_the_other_projects(monkeypatch):
    """The schedule on two streams, with the CUDA calls recorded instead of made: between two
    barriers, half a runs stage k on the main stream while half b runs stage k-1 on the side one,
    so every attention shares its phase with the other half's projections."""
    log: list = []
    main, side = _Stream("main", log), _Stream("side", log)
    current = [main]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: main)

    class _On:
        def __init__(self, s):
            self.s = s

        def __enter__(self):
            current.append(self.s)

        def __exit__(self, *exc):
            current.pop()
    monkeypatch.setattr(torch.cuda, "stream", _On)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: None, raising=False)
    model = _Recorder(log, 2, lambda: current[-1].name)
    ids = torch.arange(5)
    out = two_batch_forward(model, ids, ids, 3, None, None, side)
    assert out.shape == (5, 1)
    phases, phase = [], []
    for entry in log:
        if entry[0] == "wait":
            if phase:
                phases.append(phase)
            phase = []
        else:
            phase.append(entry)
    phases.append(phase)
    phases = [p for p in phases if p]
    assert all(s == "main" for h, _, s in (e for p in phases for e in p) if h == "a")
    assert all(s == "side" for h, _, s in (e for p in phases for e in p) if h == "b")
    # Stage by stage: a's k-th stage beside b's (k-1)-th.
    a_stages = [[st for h, st, _ in p if h == "a"] for p in phases]
    b_stages = [[st for h, st, _ in p if h == "b"] for p in phases]
    assert a_stages[0] == ["qkv0"] and b_stages[0] == []
    for k in range(1, len(phases) - 1):
        assert b_stages[k] == a_stages[k - 1]
        attends = [s for s in a_stages[k] + b_stages[k] if s.startswith("attend")]
        assert len(attends) <= 1, f"both halves attend at once in phase {k}: {phases[k]}"
    assert a_stages[-1] == [] and b_stages[-1] == a_stages[-2]
