"""Two-batch overlap (runtime.two_batch_overlap): a decode batch run as two halves, stage by stage,
gives the plain forward's hidden states. On CPU the halves run one after the other (the torch
reference backend, fp32); on a GPU they run on two streams inside the captured decode graphs."""
from __future__ import annotations

import pytest
import torch

from atom.config.compose import compose
from atom.config.validate import ConfigError
from atom.kernels.backend import get_backend
from atom.loader.model_loader import build_model
from atom.models.hf_config import load_hf_config
from atom.runner import forward_context
from atom.runner.two_batch import two_batch_forward
from tests.engine.stepping import SteppedBatch

CPU = torch.device("cpu")
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _model(name: str) -> torch.nn.Module:
    cfg = compose([f"model={name}", "load=dummy", "runtime=cpu"])
    forward_context.set_backend(get_backend("torch"))
    return build_model(cfg, load_hf_config(cfg), CPU, torch.float32)


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
@pytest.mark.parametrize("h", [1, 2, 4])
def test_halves_give_the_plain_forward(name, h):
    model = _model(name)
    batch = SteppedBatch(model, 5)
    g = torch.Generator().manual_seed(1)
    vocab = model.hf_config.vocab_size
    batch.step(model, {s: torch.randint(3, vocab, (n,), generator=g).tolist()
                       for s, n in enumerate([7, 3, 12, 1, 5])})
    for _ in range(2):
        ids, pos, meta = batch.prepare({s: [int(torch.randint(3, vocab, (1,), generator=g))]
                                        for s in range(5)})
        meta_a, meta_b = meta.split_decode(h, counters_per_row=1)
        with torch.inference_mode():
            with forward_context.forward_context(batch.context(meta)):
                plain = model(ids, pos)
            halves = two_batch_forward(model.model, ids, pos, h, batch.context(meta_a),
                                       batch.context(meta_b))
        torch.testing.assert_close(halves, plain, rtol=1e-5, atol=1e-5)


def test_split_decode_is_views_with_disjoint_counters():
    n, hk = 6, 4
    from atom.kernels.metadata import AttentionMetadata

    meta = AttentionMetadata(torch.arange(n + 1, dtype=torch.int32), torch.arange(10, 10 + n, dtype=torch.int32),
                             torch.arange(n * 3, dtype=torch.int32).view(n, 3),
                             torch.arange(n, dtype=torch.int64), 1, 16, True,
                             [1] * n, list(range(10, 10 + n)),
                             split_counters=torch.zeros(8 * hk, dtype=torch.int32))
    a, b = meta.split_decode(2, counters_per_row=hk)
    assert a.num_seqs == 2 and b.num_seqs == 4
    assert b.cu_seqlens_q.tolist() == [0, 1, 2, 3, 4]
    assert b.context_lens.tolist() == [12, 13, 14, 15] and b.context_lens_cpu == [12, 13, 14, 15]
    assert b.block_tables.data_ptr() == meta.block_tables[2].data_ptr()  # a view, not a copy
    a_end = a.split_counters.data_ptr() + 2 * hk * 4
    assert b.split_counters.data_ptr() >= a_end and b.split_counters.numel() >= 4 * hk
    with pytest.raises(AssertionError):
        meta.split_decode(0, hk)


def test_config_field_and_flag():
    import argparse

    from atom.config.flags import ENGINE_FLAGS, add_cli_args, overrides_from_args

    p = argparse.ArgumentParser()
    add_cli_args(p, ENGINE_FLAGS)
    flags = overrides_from_args(p.parse_args(["--enable-two-batch-overlap"]), ENGINE_FLAGS)
    cfg = compose(["model=tiny_llama", "load=dummy", *flags])
    assert cfg.runtime.two_batch_overlap is True and cfg.runtime.two_batch_min_batch == 128
    with pytest.raises(ConfigError, match="runtime.two_batch_min_batch"):
        compose(["model=tiny_llama", "load=dummy", "runtime.two_batch_min_batch=1"])


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen3"])
def test_graphs_with_two_streams_generate_what_one_stream_does(model):
    """fp32 weights on the triton backend, every decode size from 4 up split in halves."""
    from atom.model_engine.llm_engine import LLMEngine
    from atom.sampling_params import SamplingParams

    prompts = [[(7 * i + j) % 200 + 3 for j in range(5 + 3 * i)] for i in range(8)]
    runs = []
    for overlap in ("false", "true"):
        cfg = compose([f"model={model}", "load=dummy", "kv_cache.num_blocks=128", "model.dtype=float32",
                       "runtime.level=2", "runtime.cudagraph_capture_sizes=[1,2,4,8]",
                       f"runtime.two_batch_overlap={overlap}", "runtime.two_batch_min_batch=4"])
        eng = LLMEngine.from_config(cfg)
        outs = eng.generate(prompts, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
        runs.append([o["token_ids"] for o in outs])
        eng.shutdown()
    assert runs[0] == runs[1]
