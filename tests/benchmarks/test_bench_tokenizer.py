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


def test_an_entry_without_a_tokenizer_gets_the_servers_stand_in():
    """conf/model/deepseek_r1 names no tokenizer (dummy weights at R1's shapes): its server
    counts tokens with the byte-level stand-in, so the benchmark does too."""
    from atom.benchmarks.byte_tokenizer import ByteLevelTokenizer

    assert isinstance(get_tokenizer("deepseek-ai/DeepSeek-R1"), ByteLevelTokenizer)


@pytest.mark.parametrize("byte_tokenizer", [False, True])
def test_a_prompt_count_mismatch_names_a_fix_the_user_can_make(byte_tokenizer):
    """Someone already on `--tokenizer bytes` is not told to pass `--tokenizer bytes`."""
    from types import SimpleNamespace

    from atom.benchmarks.report import _server_input_lines

    (_, warning) = _server_input_lines(SimpleNamespace(server_total_input=300, total_input=100),
                                       byte_tokenizer)
    assert "a local dir, a .gguf or a conf/model name" in warning
    assert ("bytes matches a dummy-weight atom server only" in warning) is byte_tokenizer
    assert ("--tokenizer bytes for a dummy-weight" in warning) is not byte_tokenizer
