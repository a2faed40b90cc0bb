"""The reasoning split: one splitter for both delivery modes, byte-exact, nothing stripped."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atom.chat.reasoning import ReasoningChannel
from atom.chat.reasoning_dialects import (
    DEEPSEEK_R1, DIALECTS, KIMI_K3, NONE, THINK, generation_part, resolve_dialect)

CHUNKS = (1, 2, 3, 7, 64, None)


def streamed(channel, text, size):
    splitter = channel.stream()
    pieces = []
    step = size or max(1, len(text))
    for i in range(0, len(text), step):
        pieces += splitter.feed(text[i:i + step])
        assert splitter.held < max(len(m) for m in channel.dialect.markers or ("x",))
    pieces += splitter.finish()
    return ("".join(p.text for p in pieces if p.reasoning),
            "".join(p.text for p in pieces if not p.reasoning))


def shapes(d):
    s, e = d.start, d.end
    return [
        "The answer.",
        f"{s}plan{e}\n\nThe answer.\n",
        f"{s}\nplan\n{e}The answer.",
        f"Answer first. {s}then think{e} and answer again.\n",
        f"plan only{e}\n\nThe answer.",
        f"{s}never closed",
        f"quoting {e[:-1]} is not a marker",
        "if (a < b) return;\n",
        " \n\t\n",
        "",
    ]


@pytest.mark.parametrize("dialect", [THINK, DEEPSEEK_R1, KIMI_K3], ids=lambda d: d.name)
@pytest.mark.parametrize("inside", [False, True])
def test_split_equals_stream_at_every_chunk_size(dialect, inside):
    channel = ReasoningChannel(dialect, inside)
    for text in shapes(dialect):
        whole = channel.split(text)
        unmarked = text.replace(dialect.start, "").replace(dialect.end, "")
        assert sum(map(len, whole)) == len(unmarked)  # nothing lost but the markers
        for size in CHUNKS:
            assert streamed(channel, text, size) == whole, (text, size)


def test_whitespace_after_end_marker_is_content():
    channel = ReasoningChannel(THINK, begins_inside=True)
    assert channel.split("plan</think>\n\nThe answer.") == ("plan", "\n\nThe answer.")
    for size in CHUNKS:
        assert streamed(channel, "plan</think>\n\nThe answer.\n", size) == \
            ("plan", "\n\nThe answer.\n")


def test_end_marker_matched_anywhere_and_blocks_reopen():
    channel = ReasoningChannel(THINK, begins_inside=False)
    text = "Answer. <think>more thought</think> Answer again."
    assert channel.split(text) == ("more thought", "Answer.  Answer again.")


def test_dialect_is_not_the_union_of_dialects():
    """A <think> model quoting K3's framing keeps it as text; only its own end marker closes."""
    channel = ReasoningChannel(THINK, begins_inside=True)
    text = "K3 writes <|close|>think<|sep|> here</think>answer"
    assert channel.split(text) == ("K3 writes <|close|>think<|sep|> here", "answer")


def test_none_dialect_is_identity():
    channel = ReasoningChannel(NONE, begins_inside=True)
    assert channel.split("<think>x</think>y") == ("", "<think>x</think>y")


@pytest.mark.parametrize("generation,thinking_off,inside", [
    ("<｜Assistant｜><think>\n", None, True),
    ("<｜Assistant｜><think>\n</think>", True, False),
    ("<｜Assistant｜>", None, True),      # configured R1: a silent generation prompt opens
    ("<｜Assistant｜>", True, False),     # ...unless this request switched thinking off
    (None, None, True),
])
def test_begins_inside_is_per_request(generation, thinking_off, inside):
    assert ReasoningChannel.for_request(DEEPSEEK_R1, generation,
                                        thinking_off).begins_inside is inside


def test_think_dialect_reads_the_generation_prompt():
    assert ReasoningChannel.for_request(THINK, "<|im_start|>assistant\n<think>\n").begins_inside
    assert not ReasoningChannel.for_request(
        THINK, "<|im_start|>assistant\n<think>\n\n</think>\n\n").begins_inside
    assert not ReasoningChannel.for_request(THINK, "<|im_start|>assistant\n").begins_inside
    assert ReasoningChannel.for_request(THINK, "", opens_by_default=True).begins_inside
    assert not ReasoningChannel.for_request(THINK, "", True, opens_by_default=True).begins_inside


def test_generation_part_is_what_the_template_added():
    """A user message that ends quoting `<think>` is not the generation prompt opening it."""
    base = "<|im_start|>user\nwhat is <think>?<|im_end|>\n"
    assert generation_part(base + "<|im_start|>assistant\n", base, THINK) == \
        "<|im_start|>assistant\n"
    assert THINK.prompt_state(generation_part("q <think>\nA", "q <think>", THINK)) is None
    assert THINK.prompt_state(generation_part(base + "<|im_start|>assistant\n", base,
                                              THINK)) is None
    assert THINK.prompt_state(generation_part(base + "<think>\n", base, THINK)) is True
    # a marker the boundary cuts is whole again
    assert THINK.prompt_state(generation_part("ab<think>", "ab<th", THINK)) is True
    assert generation_part("x" * 100 + "<think>", None, THINK).endswith("<think>")


def test_resolve_dialect_by_name_and_unknown():
    assert all(resolve_dialect(None, name) is d for name, d in DIALECTS.items())
    assert resolve_dialect(None) is THINK
    with pytest.raises(ValueError):
        resolve_dialect(None, "nope")


_ALPHA = st.sampled_from(list("ab \n<>/|") + ["<think>", "</think>", "</thi", "<|close|>think<|sep|>",
                                             "<|open|>think<|sep|>", "<|sep|>"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_ALPHA, max_size=30), st.sampled_from([THINK, KIMI_K3]), st.booleans(),
       st.lists(st.integers(1, 200), max_size=6))
def test_random_text_split_is_chunk_invariant(parts, dialect, inside, cuts):
    text = "".join(parts)
    channel = ReasoningChannel(dialect, inside)
    whole = channel.split(text)
    splitter = channel.stream()
    bounds = [0] + sorted(c for c in set(cuts) if c < len(text)) + [len(text)]
    pieces = list(itertools.chain.from_iterable(
        splitter.feed(text[a:b]) for a, b in zip(bounds, bounds[1:])))
    pieces += splitter.finish()
    got = ("".join(p.text for p in pieces if p.reasoning),
           "".join(p.text for p in pieces if not p.reasoning))
    assert got == whole
