"""Fixtures for the benchmark tests: a tiny local tokenizer and the fake servers."""
from __future__ import annotations

from pathlib import Path

import pytest

from atom.benchmarks.benchmark_datasets import SONNET_PATH

CHAT_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<s> assistant : {% endif %}"
)


def build_tiny_tokenizer(out_dir: Path) -> Path:
    """A word-level tokenizer trained on the shipped sonnets: every word one token, so lengths in
    tests are exact. Saved so `AutoTokenizer.from_pretrained(dir)` loads it like a real one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([str(SONNET_PATH)], trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return out_dir


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path):
    from atom.benchmarks.tokenizer_source import get_tokenizer

    return get_tokenizer(str(tokenizer_dir))
