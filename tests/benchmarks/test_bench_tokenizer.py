"""The benchmark finds its tokenizer the way the server finds the model's: `bytes`, a local dir,
a .gguf, a conf/model entry or its served name; never a model hub."""
from __future__ import annotations

import pytest

from atom.benchmarks.byte_tokenizer import ByteLevelTokenizer
from atom.benchmarks.tokenizer_source import conf_model_entry, get_tokenizer


def test_conf_entries_resolve_by_file_name_and_served_name():
    assert conf_model_entry("smollm2_135m") == "smollm2_135m"
    assert conf_model_entry("HuggingFaceTB/SmolLM2-135M-Instruct") == "smollm2_135m"
    assert conf_model_entry("no/such-model") is None


def test_a_dummy_weight_entry_gets_the_byte_twin_of_its_servers_stand_in():
    assert isinstance(get_tokenizer("tiny_llama"), ByteLevelTokenizer)


def test_a_local_dir_loads(tokenizer_dir):
    assert get_tokenizer(str(tokenizer_dir)).encode("shall I compare", add_special_tokens=False)


def test_an_unknown_name_says_what_is_accepted():
    with pytest.raises(FileNotFoundError, match="conf/model entry or served name.*--tokenizer bytes"):
        get_tokenizer("meta-llama/Not-Here")


def test_an_entry_this_machine_cannot_build_says_why():
    with pytest.raises(FileNotFoundError, match="deepseek_r1.*not implemented yet"):
        get_tokenizer("deepseek-ai/DeepSeek-R1")
