"""The embedded default model with real weights: atom's greedy continuation equals transformers'
on the same GGUF (both dequantize it to float32), token for token."""
from __future__ import annotations

import pytest
import torch

import atom
from atom import SamplingParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, there was a",
           "The three primary colors are", "Water boils at a temperature of"]
MAX_NEW = 16


@pytest.fixture(scope="module")
def engine():
    return atom.build_engine(atom.compose(["runtime=cpu", "load.progress_bar=false"]))


def test_greedy_matches_transformers_on_gguf(engine):
    from transformers import AutoModelForCausalLM

    from atom.models.hf_config import model_source

    path = model_source(engine.config)
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                               dtype=torch.float32).eval()
    tok = engine.tokenizer
    outs = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True))
    with torch.no_grad():
        for prompt, out in zip(PROMPTS, outs):
            ids = tok.encode(prompt)
            for _ in range(MAX_NEW):
                ids.append(int(ref(torch.tensor([ids])).logits[0, -1].argmax()))
            expected = ids[-MAX_NEW:]
            assert out["token_ids"] == expected, (prompt, tok.decode(out["token_ids"]), tok.decode(expected))
    assert "Paris" in outs[0]["text"]
