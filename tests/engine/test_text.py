"""Incremental detokenization and stop strings, on the default model's real tokenizer."""
from __future__ import annotations

import pytest

import atom
from atom.model_engine.detokenizer import IncrementalDetokenizer
from atom.model_engine.messages import StepOutput
from atom.model_engine.output_processor import OutputProcessor
from atom.model_engine.stop_strings import StopStringMatcher
from atom.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def tok():
    from atom.builder import build_tokenizer

    return build_tokenizer(atom.compose([]))


TEXTS = ["Hello, world! 😊 naïve café — 你好，世界。", "  leading spaces\n\ttabs and 🎉🎉 emoji",
         "def f(x):\n    return x ** 2  # 平方\n"]


@pytest.mark.parametrize("text", TEXTS)
def test_token_by_token_decode_equals_full_decode_and_never_half_a_char(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    d = IncrementalDetokenizer(tok, [], skip_special_tokens=True)
    pieces = [d.push([t]) for t in ids] + [d.flush()]
    assert "".join(pieces) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_stop_string_split_across_chunks_is_matched_and_never_half_released():
    m = StopStringMatcher(["</answer>"])
    released = ""
    for chunk in ["The result is 4", "2</ans", "wer> trailing"]:
        m.feed(chunk)
        upto = m.releasable(final=False)
        released = m.text[:upto]
        assert "</" not in released
    assert m.stopped and m.text == "The result is 42"


def test_include_stop_string_keeps_it():
    m = StopStringMatcher(["STOP"], include_stop=True)
    m.feed("abcST")
    m.feed("OPdef")
    assert m.stopped and m.text == "abcSTOP"


def test_stop_string_hit_asks_the_core_to_abort(tok):
    proc = OutputProcessor(tok)
    ids = tok.encode("one two three four", add_special_tokens=False)
    proc.add_request("r", [1, 2], SamplingParams(stop_strings=[" three"]))
    outs, abort = proc.process([StepOutput(request_id="r", new_token_ids=ids)])
    assert abort == ["r"]
    assert outs[0].finished and outs[0].finish_reason == "stop" and outs[0].text == "one two"
