"""The one reader, held to the spec's invariants for every registered format.

Shapes x chunk sizes (tables), then hypothesis over random text with markers and calls mixed in.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "templates"))
import tool_wire  # noqa: E402

from atom.chat.reader import ResponseReader, read_response  # noqa: E402
from atom.chat.reasoning import ReasoningChannel  # noqa: E402
from atom.chat.reasoning_dialects import KIMI_K3, THINK  # noqa: E402
from atom.chat.tool_parser.events import (  # noqa: E402
                                          ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart)
from atom.chat.tool_parser.policy import ToolPolicy  # noqa: E402
from atom.chat.tool_parser.registry import FORMATS  # noqa: E402
from atom.chat.tool_parser.stream import ToolCallStream, read_whole  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "notes": {"type": "string"}}}
POLICY = ToolPolicy({"get_weather": SCHEMA, "get_time": {"properties": {"zone": {"type": "string"}}}})
CALL = ("get_weather", {"city": "Paris", "days": 3})
CALL2 = ("get_time", {"zone": "Europe/Paris"})
CHUNKS = (1, 2, 3, 7, 64, None)
NAMES = sorted(FORMATS)


def ids():
    n = iter(range(10**6))
    return lambda: f"call_{next(n)}"


def opener(fmt: str) -> str:
    cls = FORMATS[fmt]
    return next(m for m in cls.START_MARKERS if cls.opens_region(m))


def shapes(fmt: str) -> dict[str, tool_wire.Answer]:
    a = tool_wire.answer
    quote = f"To call a tool the model writes {opener(fmt)} and then the call; that is all.\n"
    out = {
        "plain": a(fmt, ["The answer is 42.\n"]),
        "quotes_marker": a(fmt, [quote]),
        "opens_with_marker": a(fmt, [opener(fmt) + " is how a call begins, explained at length."]),
        "prose_lt": a(fmt, ["if (a < b) { return a; } else if (b <= c) return c; // x</y>\n"]),
        "one_call": a(fmt, [[CALL]]),
        "text_then_call": a(fmt, ["Let me check.\n", [CALL]]),
        "call_then_text": a(fmt, [[CALL], "\nThe weather in Paris is sunny, 21 degrees.\n"]),
        "two_calls": a(fmt, [[CALL, CALL2]]),
        "undeclared": a(fmt, [[("launch_rockets", {"target": "moon"})]]),
        "whitespace": a(fmt, [" \n\t \n"]),
        "trailing_newline": a(fmt, ["Done.\n"]),
    }
    whole = a(fmt, [[CALL]])
    cut = whole.wire.index("Paris") + 3
    out["truncated"] = tool_wire.Answer(whole.wire[:cut], "", [("get_weather", {"city": "Par"})])
    return out


def chunked(text: str, size):
    if size is None:
        return [text]
    return [text[i:i + size] for i in range(0, len(text), size)]


def summary(events):
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    names = {e.index: e.name for e in events if isinstance(e, ToolCallStart)}
    calls = [(names[e.index], json.loads(e.arguments)) for e in events
             if isinstance(e, ToolCallArgs)]
    return content, reasoning, calls


def stream(fmt, text, size, policy=POLICY, trace=None, per_chunk=None):
    reader = ToolCallStream(FORMATS[fmt], policy, ids(), trace)
    events = []
    for piece in chunked(text, size):
        events += reader.feed(piece)
        if per_chunk is not None:
            per_chunk(reader, events)
    return events + reader.finish()


CASES = [(f, s) for f in NAMES for s in shapes(f)]


@pytest.mark.parametrize("fmt,shape", CASES)
def test_stream_equals_whole_and_expected(fmt, shape):
    """Property 1 at every chunk size, and the delivered answer is the right one."""
    ans = shapes(fmt)[shape]
    whole = summary(read_whole(FORMATS[fmt], ans.wire, POLICY, ids()))
    assert whole == (ans.content, "", [(n, a) for n, a in ans.calls])
    for size in CHUNKS:
        assert summary(stream(fmt, ans.wire, size)) == whole, size


@pytest.mark.parametrize("fmt,shape", CASES)
def test_held_bytes_bounded_and_nothing_lost(fmt, shape):
    """Properties 2 and 4: outside a region at most longest-1 bytes wait; content + markup is
    every byte the model wrote."""
    ans = shapes(fmt)[shape]
    for size in CHUNKS:
        trace: list[tuple[str, str]] = []
        fed = []

        def check(reader, _events, fed=fed, trace=trace):
            if not reader.in_region:
                delivered = sum(len(t) for _, t in trace)
                assert sum(fed) - delivered == reader.held_outside < reader.longest_marker

        reader_fed = chunked(ans.wire, size)
        reader = ToolCallStream(FORMATS[fmt], POLICY, ids(), trace)
        for piece in reader_fed:
            fed.append(len(piece))
            reader.feed(piece)
            check(reader, None)
        reader.finish()
        assert "".join(t for _, t in trace) == ans.wire


@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("size", (1, 2, 3, 7))
def test_text_after_call_streams_before_eos(fmt, size):
    """Property 3: the explanation after a call is released as it arrives, not at end."""
    ans = shapes(fmt)["call_then_text"]
    after = "\nThe weather in Paris is sunny, 21 degrees.\n"
    reader = ToolCallStream(FORMATS[fmt], POLICY, ids())
    events = []
    for piece in chunked(ans.wire, size):
        events += reader.feed(piece)
    before_eos = summary(events)[0]
    bound = FORMATS[fmt].START_MARKERS and max(map(len, FORMATS[fmt].START_MARKERS))
    assert after[:len(after) - bound] in before_eos


def _reasoning_then_call(fmt):
    call = tool_wire.answer(fmt, [[CALL]])
    if fmt == "kimi_k3":
        channel = ReasoningChannel(KIMI_K3, begins_inside=True)
        return channel, "Let me think about Paris.\n" + KIMI_K3.end + call.wire
    return ReasoningChannel(THINK, False), "<think>Let me think about Paris.\n</think>\n\n" + call.wire


@pytest.mark.parametrize("fmt", NAMES)
def test_reasoning_then_call(fmt):
    channel, text = _reasoning_then_call(fmt)
    whole = summary(read_response(channel, FORMATS[fmt], text, POLICY, ids()))
    assert whole[1] == "Let me think about Paris.\n"
    assert whole[2] == [CALL]
    for size in CHUNKS:
        reader = ResponseReader(channel, FORMATS[fmt], POLICY, ids())
        events = [e for piece in chunked(text, size) for e in reader.feed(piece)]
        assert summary(events + reader.finish()) == whole


@pytest.mark.parametrize("fmt", NAMES)
def test_tool_choice_none_keeps_answer_and_hides_markup(fmt):
    ans = tool_wire.answer(fmt, ["Checking.\n", [CALL], "\nDone."])
    policy = ToolPolicy.from_request([{"type": "function", "function": {
        "name": "get_weather", "parameters": SCHEMA}}], "none")
    for size in CHUNKS:
        content, _, calls = summary(stream(fmt, ans.wire, size, policy))
        assert calls == [] and content == ans.content


@pytest.mark.parametrize("fmt", NAMES)
def test_named_tool_choice_dispatches_only_that_tool(fmt):
    ans = tool_wire.answer(fmt, [[CALL, CALL2]])
    policy = ToolPolicy.from_request(
        [{"type": "function", "function": {"name": n, "parameters": SCHEMA}}
         for n in ("get_weather", "get_time")],
        {"type": "function", "function": {"name": "get_time"}})
    for size in CHUNKS:
        events = stream(fmt, ans.wire, size, policy)
        assert summary(events)[2] == [CALL2]
        assert [e.index for e in events if isinstance(e, ToolCallStart)] == [0]


# --- hypothesis: random answers ----------------------------------------------------------------

_ALPHABET = st.sampled_from(list("ab <>/{}\"=|:\n\t") + ["</", "<|", "｜", "think>", "name"])


@st.composite
def random_answer(draw, fmt):
    pieces = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["text", "text", "marker", "call"]))
        if kind == "text":
            pieces.append(("".join(draw(st.lists(_ALPHABET, max_size=12))), None))
        elif kind == "marker":
            pieces.append((draw(st.sampled_from(FORMATS[fmt].START_MARKERS)), None))
        else:
            pieces.append((None, draw(st.sampled_from([[CALL], [CALL2], [CALL, CALL2]]))))
    wire = "".join(t if t is not None else tool_wire.call_block(fmt, c)[0] for t, c in pieces)
    cuts = draw(st.lists(st.integers(1, max(1, len(wire))), max_size=8))
    return wire, sorted(set(cuts))


def _split_at(text, cuts):
    bounds = [0] + [c for c in cuts if c < len(text)] + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@pytest.mark.parametrize("fmt", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_answers_chunk_invariant_and_lossless(fmt, data):
    wire, cuts = data.draw(random_answer(fmt))
    whole = summary(read_whole(FORMATS[fmt], wire, POLICY, ids()))
    trace: list[tuple[str, str]] = []
    reader = ToolCallStream(FORMATS[fmt], POLICY, ids(), trace)
    events = []
    for piece in _split_at(wire, cuts):
        events += reader.feed(piece)
        assert reader.in_region or reader.held_outside < reader.longest_marker
    assert summary(events + reader.finish()) == whole
    assert "".join(t for _, t in trace) == wire
