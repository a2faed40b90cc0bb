"""Issue 16's shapes: what real models write that the reader used to get wrong.

Each shape runs through the whole reader (tool regions, then the reasoning split) for every
registered format where it applies, at chunk sizes 1, 2, 3, 7, 64 and whole, and the streamed
result must be byte-identical to the non-streamed one (content, reasoning, and each call's name
and arguments string).
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

from atom.chat import kimi_k3_tokens as k3  # noqa: E402
from atom.chat.reader import ResponseReader, read_response  # noqa: E402
from atom.chat.reasoning import ReasoningChannel  # noqa: E402
from atom.chat.reasoning_dialects import KIMI_K3, THINK  # noqa: E402
from atom.chat.tool_parser.events import (  # noqa: E402
                                          ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart)
from atom.chat.tool_parser.policy import ToolPolicy  # noqa: E402
from atom.chat.tool_parser.region import ParsedCall  # noqa: E402
from atom.chat.tool_parser.registry import FORMATS  # noqa: E402
from atom.chat.tool_parser.values import typed_arguments  # noqa: E402

NAMES = sorted(FORMATS)
CHUNKS = (1, 2, 3, 7, 64, None)
SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "notes": {"type": "string"},
    "path": {"type": "string"}, "content": {"type": "string"}}}
POLICY = ToolPolicy({"get_weather": SCHEMA, "write_file": SCHEMA,
                     "get_time": {"properties": {"zone": {"type": "string"}}}})
CALL = ("get_weather", {"city": "Paris", "days": 3})
BIG = ("write_file", {"path": "notes.txt", "content": "lorem ipsum " * 40})


def ids():
    n = iter(range(10**6))
    return lambda: f"call_{next(n)}"


def dialect(fmt):
    return KIMI_K3 if fmt == "kimi_k3" else THINK


def exact(events):
    """Everything a client can see, arguments as the very string sent."""
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    starts = {e.index: e.name for e in events if isinstance(e, ToolCallStart)}
    args = {e.index: e.arguments for e in events if isinstance(e, ToolCallArgs)}
    assert set(starts) == set(args), "a start without its arguments, or arguments unnamed"
    return content, reasoning, [(starts[i], args[i]) for i in sorted(starts)]


def read(fmt, text, inside=False, policy=POLICY):
    """The non-streamed reading, held equal to the streamed one at every chunk size."""
    channel = ReasoningChannel(dialect(fmt), inside)
    whole = exact(read_response(channel, FORMATS[fmt], text, policy, ids()))
    for size in CHUNKS:
        reader = ResponseReader(channel, FORMATS[fmt], policy, ids())
        step = size or len(text) or 1
        events = [e for i in range(0, len(text), step) for e in reader.feed(text[i:i + step])]
        assert exact(events + reader.finish()) == whole, size
    return whole


def parsed(calls):
    return [(n, json.loads(a)) for n, a in calls]


def block(fmt, calls):
    return tool_wire.call_block(fmt, calls)[0]


def framed(fmt, text):
    return tool_wire.answer(fmt, [text]).wire


def unframed(fmt, text):
    """What the reader leaves of answer text: the format's framing tokens are dropped."""
    cls = FORMATS[fmt]
    for m in sorted(cls.START_MARKERS, key=len, reverse=True):
        if not cls.opens_region(m):
            text = text.replace(m, "")
    return text


def opener(fmt):
    cls = FORMATS[fmt]
    return next(m for m in cls.START_MARKERS if cls.opens_region(m))


# --- 1. a call inside an open reasoning block --------------------------------------------------

@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("opened_by", ["prompt", "model"])
def test_call_inside_open_reasoning_block_is_a_call(fmt, opened_by):
    d = dialect(fmt)
    lead = "" if opened_by == "prompt" else d.start
    text = lead + "Need the file." + block(fmt, [CALL]) + framed(fmt, "Done.")
    content, reasoning, calls = read(fmt, text, inside=opened_by == "prompt")
    assert (content, reasoning, parsed(calls)) == ("Done.", "Need the file.", [CALL])


@pytest.mark.parametrize("fmt", NAMES)
def test_quoted_opener_in_reasoning_stays_reasoning(fmt):
    d = dialect(fmt)
    thought = f"I could write {opener(fmt)} here, but no."
    text = d.start + thought + d.end + framed(fmt, "Answer.")
    assert read(fmt, text) == ("Answer.", thought, [])


def test_kimi_think_then_section_and_dsml_v4_inside_prompt_opened_block():
    kimi = "<think>Need the file.<|tool_calls_section_begin|><|tool_call_begin|>functions." \
           'get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>' \
           "<|tool_calls_section_end|>"
    assert read("kimi", kimi) == ("", "Need the file.", [("get_weather", '{"city": "Paris"}')])
    t = "｜DSML｜"
    dsml = f'Plan.<{t}tool_calls>\n<{t}invoke name="get_weather">\n<{t}parameter name="city" ' \
           f'string="true">Paris</{t}parameter>\n</{t}invoke>\n</{t}tool_calls>'
    assert read("dsml", dsml, inside=True) == ("", "Plan.", [("get_weather", '{"city": "Paris"}')])


# --- 6. think tags inside tool arguments --------------------------------------------------------

@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("inside", [False, True])
def test_think_tags_inside_arguments_are_argument_text(fmt, inside):
    d = dialect(fmt)
    notes = f"a {d.start}b{d.end} c"
    call = ("get_weather", {"city": "Paris", "notes": notes})
    text = ("Plan." + d.end if inside else "") + block(fmt, [call])
    content, reasoning, calls = read(fmt, text, inside=inside)
    assert (content, reasoning, parsed(calls)) == ("", "Plan." if inside else "", [call])


# --- 8. markup shown in Markdown code is text ---------------------------------------------------

@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("code", ["fence", "tilde_indent_fence", "inline"])
def test_markup_inside_code_is_text_and_a_later_call_still_works(fmt, code):
    example = block(fmt, [CALL])
    shown = {"fence": f"Example:\n```text\n{example}\n```\n",
             "tilde_indent_fence": f"Example:\n   ````\n{example}\n````\n",
             "inline": f"Write `{opener(fmt)}` or ``{opener(fmt)} `x` `` to call it.\n"}[code]
    content, _, calls = read(fmt, framed(fmt, shown) + block(fmt, [CALL]))
    assert content == unframed(fmt, shown) and parsed(calls) == [CALL]


@pytest.mark.parametrize("fmt", NAMES)
def test_a_stray_backtick_does_not_hide_the_next_lines_call(fmt):
    text = framed(fmt, "Use the ` key.\n") + block(fmt, [CALL])
    content, _, calls = read(fmt, text)
    assert content == "Use the ` key.\n" and parsed(calls) == [CALL]


# --- 2. an announced name is a promise ----------------------------------------------------------

_CLOSER = {"hermes": "}}", "llama3_json": "}}", "qwen": "</function>", "glm": "</tool_call>",
           "minimax": "</invoke>", "dsml": "</｜DSML｜invoke>", "kimi": "}<|tool_call_end|>",
           "deepseek_v3": "}\n```", "kimi_k3": k3.CALL_CLOSE}


def _broken(fmt, call):
    """The call with stray text just before its closer: no format reads that as its markup."""
    wire = block(fmt, [call])
    at = wire.rindex(_CLOSER[fmt])
    return wire[:at] + " oops " + wire[at:]


@pytest.mark.parametrize("fmt", NAMES)
def test_a_long_call_that_fails_after_its_name_went_out_is_still_that_call(fmt):
    content, _, calls = read(fmt, _broken(fmt, BIG) + framed(fmt, "After."))
    assert [n for n, _ in calls] == ["write_file"] and "oops" in calls[0][1]
    assert content.endswith("After.")


@pytest.mark.parametrize("fmt", NAMES)
def test_a_short_call_that_fails_is_never_announced(fmt):
    """Shorter than the head: both modes decide at the close, so no stray start in either."""
    text = _broken(fmt, CALL)
    content, _, calls = read(fmt, text)
    if fmt in ("kimi", "deepseek_v3"):  # entries stand alone: raw arguments (item 5)
        assert [n for n, _ in calls] == ["get_weather"] and "oops" in calls[0][1]
    else:
        assert calls == [] and content == unframed(fmt, text)


def test_hermes_unquoted_value_is_text_in_both_modes():
    text = '<tool_call>{"name":"get_weather","arguments":{"city": Paris}}</tool_call>'
    assert read("hermes", text) == (text, "", [])


# --- 3, 4. Qwen XML -----------------------------------------------------------------------------

def _qwen(params, wrapped=True):
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    call = f"<function=write_file>\n{body}</function>"
    return f"<tool_call>\n{call}\n</tool_call>" if wrapped else call


def test_qwen_parameter_tag_inside_a_value_is_text():
    text = _qwen([("content", "Use <parameter=NAME> tags.")])
    assert parsed(read("qwen", text)[2]) == \
        [("write_file", {"content": "Use <parameter=NAME> tags."})]
    doc = "write <parameter=path>\nother.txt\n and then the value's own closer"
    text = _qwen([("path", "a.txt"), ("content", doc)])
    assert parsed(read("qwen", text)[2]) == [("write_file", {"path": "a.txt", "content": doc})]


def test_qwen_function_without_the_wrapper_is_a_call():
    text = "Sure. " + _qwen([("path", "a.txt")], wrapped=False) + " Done."
    assert read("qwen", text) == ("Sure.  Done.", "", [("write_file", '{"path": "a.txt"}')])


# --- 5. Kimi-K2 sections ------------------------------------------------------------------------

B, A, E = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
PARIS = '{"city": "Paris"}'


@pytest.mark.parametrize("section,calls", [
    (f"{B}functions.get_weather:0 {A}{PARIS}{E}", [("get_weather", PARIS)]),
    (f"{B} functions.get_weather:0\n{A}{PARIS}{E}", [("get_weather", PARIS)]),
    (f"I will call it now.{B}functions.get_weather:0{A}{PARIS}{E}", [("get_weather", PARIS)]),
    (f"{B}0{A}{PARIS}{E}{B}functions.get_time:1{A}{{}}{E}", [("get_time", "{}")]),
    (f'{B}functions.get_weather:0{A}{{"city": Paris}}{E}{B}functions.get_time:1{A}{{}}{E}',
     [("get_weather", '{"city": Paris}'), ("get_time", "{}")]),
    (f"{B}functions.get_weather:0{A}{PARIS}{E}{E}\n{E}", [("get_weather", PARIS)]),
])
def test_kimi_entries_stand_on_their_own(section, calls):
    content, _, got = read("kimi", "Checking." + SB + section + SE + "Done.")
    assert (content, got) == ("Checking.Done.", calls)


def test_deepseek_v3_entries_stand_on_their_own():
    cb, sep, ce = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
    good = f"{cb}function{sep}get_weather\n```json\n{PARIS}\n```{ce}"
    section = f"<｜tool▁calls▁begin｜>Calling. {cb}function{sep}0\n```json\n{{}}\n```{ce}\n" \
              f"{good}<｜tool▁calls▁end｜>Done."
    assert read("deepseek_v3", section) == ("Done.", "", [("get_weather", PARIS)])


@pytest.mark.parametrize("fmt,text,raw", [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": "city=Paris"}\n</tool_call>',
     "city=Paris"),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_call>',
     "[1, 2]"),
    ("llama3_json", '{"name": "get_weather", "parameters": "Paris"}', "Paris"),
    ("kimi", f"{SB}{B}functions.get_weather:0{A}city=Paris{E}{SE}", "city=Paris"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather"
     "\n```json\n{city: Paris}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "{city: Paris}"),
    ("kimi_k3", f'{k3.CALL_OPEN} tool="get_weather"{k3.SEP}{k3.JSON_OPEN}{k3.SEP}{{city: Paris}}'
     f"{k3.JSON_CLOSE}{k3.CALL_CLOSE}", "{city: Paris}"),
])
def test_arguments_that_are_no_json_object_keep_their_raw_text(fmt, text, raw):
    assert read(fmt, text)[2] == [("get_weather", raw)]


def test_kimi_ids_are_trimmed_and_stray_tokens_never_leak():
    text = f"{SB}{B} functions.get_weather:0  {A}{PARIS}{E}{SE}Done.{E}{A}"
    channel = ReasoningChannel(THINK, False)
    events = read_response(channel, FORMATS["kimi"], text, POLICY, ids())
    assert [e.id for e in events if isinstance(e, ToolCallStart)] == ["functions.get_weather:0"]
    assert read("kimi", text)[0] == "Done."


# --- 7, 9. values against the schema ------------------------------------------------------------

TYPED = {"type": "object", "properties": {
    "maybe": {"type": ["string", "null"]},
    "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    "flag": {"type": "boolean"}, "count": {"type": "integer"}, "obj": {"type": "object"},
    "ratio": {"type": "float"}, "tags": {"type": "array"}, "name": {"type": "string"},
    "bad": {"type": "integer"}}}
WRITTEN = {"maybe": "None", "opt": "nil", "flag": "True", "count": "42", "obj": "{'k': 'v'}",
           "ratio": "1.5", "tags": "['a', None]", "name": "null", "bad": "forty"}
MEANT = {"maybe": None, "opt": None, "flag": True, "count": 42, "obj": {"k": "v"}, "ratio": 1.5,
         "tags": ["a", None], "name": "null", "bad": "forty"}


@pytest.mark.parametrize("fmt", NAMES)
def test_string_values_meet_the_declared_types(fmt):
    policy = ToolPolicy({"set": TYPED})
    calls = read(fmt, block(fmt, [("set", WRITTEN)]), policy=policy)[2]
    assert parsed(calls) == [("set", MEANT)]


@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("key", ["arguments", "input"])
def test_a_lone_arguments_wrapper_is_unwrapped(fmt, key):
    calls = read(fmt, block(fmt, [("get_weather", {key: {"city": "Paris"}})]))[2]
    assert parsed(calls) == [("get_weather", {"city": "Paris"})]


def test_dsml_wrapper_written_as_a_string_and_a_declared_input_parameter():
    t = "｜DSML｜"
    text = f'<{t}invoke name="get_weather">\n<{t}parameter name="arguments" string="true">' \
           f'{{"city": "Paris"}}</{t}parameter>\n</{t}invoke>'
    assert parsed(read("dsml", text)[2]) == [("get_weather", {"city": "Paris"})]
    declared = {"properties": {"input": {"type": "object"}}}
    call = ParsedCall("f", {"input": {"city": "Paris"}}, True)
    assert typed_arguments(call, declared) == {"input": {"city": "Paris"}}


def test_values_that_do_not_read_as_the_type_stay_strings():
    call = ParsedCall("f", {"flag": "yes", "count": "4.5", "obj": "__import__('os')",
                            "n": "None"}, True)
    schema = {"properties": {"flag": {"type": "boolean"}, "count": {"type": "integer"},
                             "obj": {"type": "object"}, "n": {"type": "integer"}}}
    assert typed_arguments(call, schema) == {"flag": "yes", "count": "4.5",
                                             "obj": "__import__('os')", "n": "None"}


# --- random answers through the whole reader -----------------------------------------------------

_BITS = ["a", " ", "\n", "`", "```", "<", ">", "/", "{", "}", '"', "|", "think", "name"]


@st.composite
def mixed_answer(draw, fmt):
    d = dialect(fmt)
    bits = _BITS + [d.start, d.end] + list(FORMATS[fmt].START_MARKERS)
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 6))
        if kind == 0:
            parts.append(block(fmt, [draw(st.sampled_from([CALL, BIG]))]))
        elif kind == 1:
            parts.append(_broken(fmt, draw(st.sampled_from([CALL, BIG]))))
        else:
            parts.append("".join(draw(st.lists(st.sampled_from(bits), max_size=8))))
    return "".join(parts), draw(st.booleans()), draw(st.lists(st.integers(1, 400), max_size=6))


@pytest.mark.parametrize("fmt", NAMES)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_mixed_answers_read_alike_in_both_modes(fmt, data):
    text, inside, cuts = data.draw(mixed_answer(fmt))
    channel = ReasoningChannel(dialect(fmt), inside)
    whole = exact(read_response(channel, FORMATS[fmt], text, POLICY, ids()))
    reader = ResponseReader(channel, FORMATS[fmt], POLICY, ids())
    bounds = [0] + sorted(c for c in set(cuts) if c < len(text)) + [len(text)]
    events = [e for a, b in zip(bounds, bounds[1:]) for e in reader.feed(text[a:b])]
    assert exact(events + reader.finish()) == whole
