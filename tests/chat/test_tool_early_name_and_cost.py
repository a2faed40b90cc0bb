"""Property 5 (the name before the arguments) and property 6 (linear cost), measured."""
from __future__ import annotations

import gc
import math
import statistics
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "templates"))
import tool_wire  # noqa: E402

from atom.chat.reader import ResponseReader, read_response  # noqa: E402
from atom.chat.reasoning import ReasoningChannel  # noqa: E402
from atom.chat.reasoning_dialects import KIMI_K3, THINK  # noqa: E402
from atom.chat.tool_parser.events import ToolCallArgs, ToolCallStart  # noqa: E402
from atom.chat.tool_parser.policy import ToolPolicy  # noqa: E402
from atom.chat.tool_parser.registry import FORMATS  # noqa: E402
from atom.chat.tool_parser.stream import ToolCallStream  # noqa: E402

NAMES = sorted(FORMATS)
POLICY = ToolPolicy({"write_file": {"properties": {"path": {"type": "string"},
                                                    "content": {"type": "string"}}}})
BIG_CALL = ("write_file", {"path": "notes.txt", "content": "lorem ipsum " * 67})  # ~800 bytes


def _reads_in_progress(fmt: str) -> bool:
    """Can parse_region name a call whose arguments are still arriving?"""
    wire = tool_wire.call_block(fmt, [BIG_CALL])[0]
    half = wire[:wire.index("lorem") + 200]
    parsed = FORMATS[fmt].parse_region(half, at_end=False)
    return parsed is not None and any(c.name == "write_file" for c in parsed.calls)


def _name_lands_first(fmt: str, chunk: int = 7) -> bool:
    """Streamed at `chunk` bytes, does ToolCallStart arrive in an earlier chunk than the args?"""
    wire = tool_wire.call_block(fmt, [BIG_CALL])[0]
    reader = ToolCallStream(FORMATS[fmt], POLICY)
    start_at = args_at = None
    pieces = [wire[i:i + chunk] for i in range(0, len(wire), chunk)]
    for n, piece in enumerate(pieces + [None]):
        events = reader.feed(piece) if piece is not None else reader.finish()
        for e in events:
            if isinstance(e, ToolCallStart) and start_at is None:
                start_at = n
            if isinstance(e, ToolCallArgs) and args_at is None:
                args_at = n
    assert start_at is not None and args_at is not None
    return start_at < args_at


def test_early_name_agrees_with_in_progress_parse():
    """Nothing declares which formats name early: both facts are measured and must agree."""
    measured = {f: (_reads_in_progress(f), _name_lands_first(f)) for f in NAMES}
    assert all(a == b for a, b in measured.values()), measured
    assert sum(a for a, _ in measured.values()) >= 4, measured


@pytest.mark.parametrize("fmt", NAMES)
def test_early_name_is_declared_and_in_head(fmt):
    """Undeclared names are never announced early; a declared one lands within the head."""
    wire = tool_wire.call_block(fmt, [BIG_CALL])[0]
    reader = ToolCallStream(FORMATS[fmt], ToolPolicy({"other_tool": {}}))
    early = [e for i in range(0, len(wire) - 40, 5) for e in reader.feed(wire[i:i + 5])]
    assert not any(isinstance(e, ToolCallStart) for e in early)


# --- property 6: linear cost -------------------------------------------------------------------

_UNITS = {"prose_with_lt": "if (a < b) then x; ",
          "region_never_closes": "if (a < b) then x; ",
          "thinking_with_code": "if (a `<` b) ``` then x;\n```y`` </thi "}
_TOKEN = 4  # characters per token


def _opener(fmt: str) -> str:
    cls = FORMATS[fmt]
    return next(m for m in cls.START_MARKERS if cls.opens_region(m))


def _channel(fmt: str) -> ReasoningChannel:
    return ReasoningChannel(KIMI_K3 if fmt == "kimi_k3" else THINK, False)


def _answer(fmt: str, tokens: int, kind: str) -> str:
    unit = _UNITS[kind]
    body = (unit * (tokens * _TOKEN // len(unit) + 1))[:tokens * _TOKEN]
    if kind == "region_never_closes":
        return _opener(fmt) + body
    if kind == "thinking_with_code":
        return _channel(fmt).dialect.start + body
    return body


def _read_time(fmt: str, text: str, chunk: int = _TOKEN) -> float:
    """CPU time of this thread through the whole reader (tool regions, code spans, reasoning):
    other processes on a shared box do not count against it."""
    reader = ResponseReader(_channel(fmt), FORMATS[fmt], POLICY)
    t0 = time.thread_time()
    for i in range(0, len(text), chunk):
        reader.feed(text[i:i + chunk])
    reader.finish()
    return time.thread_time() - t0


def _growth(fmt: str, kind: str) -> list[float]:
    """Per-doubling growth, each size timed best-of-three with the sizes interleaved so that
    load on the shared box hits them alike; GC paused so a collection lands on no one size."""
    sizes = (2000, 4000, 8000, 16000)
    texts = [_answer(fmt, n, kind) for n in sizes]
    best = [float("inf")] * len(sizes)
    gc.disable()
    try:
        for _ in range(3):
            for i, text in enumerate(texts):
                best[i] = min(best[i], _read_time(fmt, text))
    finally:
        gc.enable()
    return [b / a for a, b in zip(best, best[1:])]


@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("kind", sorted(_UNITS))
def test_cost_is_linear(fmt, kind):
    """Token-at-a-time reads of 2k/4k/8k/16k tokens grow ~2x per doubling: at most 2.5x on
    average and 3x at any one step, where a quadratic reader grows 4x."""
    attempts = []
    for _ in range(3):  # a load spike can fake one bad step; a quadratic reader fails all three
        growth = _growth(fmt, kind)
        attempts.append(growth)
        if math.prod(growth) ** (1 / len(growth)) <= 2.5 and max(growth) <= 3.0:
            return
    pytest.fail(f"superlinear growth per doubling: {attempts}")


@pytest.mark.parametrize("fmt", NAMES)
@pytest.mark.parametrize("kind", ["region_never_closes", "thinking_with_code"])
def test_250kb_answer_reads_well_under_a_second(fmt, kind):
    text = _answer(fmt, 250_000 // _TOKEN, kind)
    t0 = time.perf_counter()
    read_response(_channel(fmt), FORMATS[fmt], text, POLICY)
    whole = time.perf_counter() - t0
    streamed = statistics.median(_read_time(fmt, text, chunk=64) for _ in range(3))
    assert whole < 0.25 and streamed < 1.0, (whole, streamed)
