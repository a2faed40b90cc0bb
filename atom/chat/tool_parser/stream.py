"""The one reader: the engine both delivery modes run through.

`stream=false` is `read_whole`, this engine over a single chunk, so the two modes cannot disagree.

Where a byte is and how long it waits:
  before any start marker      released at once, except a suffix that may begin a marker
                               (MarkerScanner: bounded by the longest marker); an opener inside
                               Markdown code (code_spans.py) is text;
  inside a region, before the  held; once the region's first `Region.HEAD` bytes are in and
  head is whole                `parse_region(head, at_end=False)` names a declared tool, the name
                               goes out (`ToolCallStart`);
  inside, the argument values  held until the region closes, then sent whole as JSON (raw
                               text where the model wrote no JSON object);
  after the region closed      released as it arrives.
A start marker is not a promise: a region that parses to no call is released verbatim. A name
that went out is one: a region whose call was announced and then fails to parse is still that
call, ending at its first closer past the head, with the raw text the model wrote as arguments.
The head is read at one fixed length so that the announcement, and so the promise, is the same
however the text was chunked.
"""
from __future__ import annotations

import json
import uuid
from typing import Callable, Optional

from atom.chat.marker_scanner import MarkerScanner
from atom.chat.tool_parser.code_spans import CodeSpans
from atom.chat.tool_parser.events import (
    CallFound, ContentDelta, RegionOpened, StreamEvent, ToolCallArgs, ToolCallStart)
from atom.chat.tool_parser.policy import ToolPolicy
from atom.chat.tool_parser.region import ParsedCall, RegionParse, ToolFormat
from atom.chat.tool_parser.values import typed_arguments

Trace = list[tuple[str, str]]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class Region:
    """The bytes from a region's opener on; only `head` is read for the early name.

    Kept as a list of chunks joined only when the format is asked about the whole region, so a
    region that never closes costs linear time, not a copy per chunk.
    """

    HEAD = 256

    def __init__(self, text: str) -> None:
        self._parts: list[str] = [text]
        self._fresh: list[str] = [text]
        self._tail = ""
        self._head = text[:self.HEAD]
        self.size = len(text)
        self.closing = False
        self.head_done = False
        self.announced: list[tuple[int, str, str]] = []
        self.head_calls: tuple[ParsedCall, ...] = ()

    def append(self, text: str) -> None:
        self._parts.append(text)
        self._fresh.append(text)
        self.size += len(text)
        if len(self._head) < self.HEAD:
            self._head += text[:self.HEAD - len(self._head)]

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0]

    @property
    def head(self) -> str:
        return self._head

    def take_window(self, keep: int) -> str:
        """What arrived since the last call, plus the `keep` characters before it."""
        window = self._tail + "".join(self._fresh)
        self._fresh = []
        self._tail = window[-keep:] if keep > 0 else ""
        return window


class ToolCallStream:
    """Per-request streaming reader of one tool-call format.

    `mark_regions` adds the internal `RegionOpened`/`CallFound` events the response reader needs
    to end the reasoning channel at a call.
    """

    def __init__(self, fmt: type[ToolFormat], policy: Optional[ToolPolicy] = None,
                 new_id: Callable[[], str] = new_call_id, trace: Optional[Trace] = None,
                 mark_regions: bool = False) -> None:
        self._fmt = fmt
        self._policy = policy or ToolPolicy()
        self._new_id = new_id
        self._trace = trace
        self._marks = mark_regions
        self._scanner = MarkerScanner(fmt.START_MARKERS)
        self._closers = fmt.region_closers()
        self._closer_len = max((len(c) for c in self._closers), default=0)
        self._code = CodeSpans()
        self._pending = ""
        self._region: Optional[Region] = None
        self._next_index = 0

    @property
    def in_region(self) -> bool:
        return self._region is not None

    @property
    def held_outside(self) -> int:
        return len(self._pending)

    @property
    def longest_marker(self) -> int:
        return self._scanner.longest

    def feed(self, text: str) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if self._region is not None:
            self._region.append(text)
        else:
            self._pending += text
        self._run(out)
        return out

    def finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        while self._region is not None:
            region, self._region = self._region, None
            parsed = self._fmt.parse_region(region.text, at_end=True)
            if parsed is None or (not parsed.calls and parsed.end is None):
                if not region.announced:
                    self._release_opener(out, region.text)
                    continue
                end = self._promised_end(region, at_end=True)
                assert end is not None
                self._keep_promise(out, region, end)
            else:
                end = len(region.text) if parsed.end is None else parsed.end
                self._dispatch(out, region, parsed, end)
            self._pending = region.text[end:]
            self._run(out)
        self._content(out, self._pending)
        self._pending = ""
        return out

    def _release_opener(self, out: list[StreamEvent], text: str) -> None:
        """Not a call: its opener is content, and the rest is read again as ordinary text, so
        a quoted opener loses nothing and framing after it is still dropped."""
        hit = self._scanner.find(text)
        opener = len(hit.marker) if hit is not None and hit.pos == 0 else len(text)
        self._content(out, text[:opener])
        self._pending = text[opener:]
        self._run(out)

    def _run(self, out: list[StreamEvent]) -> None:
        while self._scan_outside(out) if self._region is None else self._step_region(out):
            pass

    def _scan_outside(self, out: list[StreamEvent]) -> bool:
        """Release what cannot begin a marker; True once a region opened."""
        buf = self._pending
        while (hit := self._scanner.find(buf)) is not None:
            self._content(out, buf[:hit.pos])
            if not self._fmt.opens_region(hit.marker):
                self._markup(hit.marker)
            elif self._code.inside:
                self._content(out, hit.marker)
            else:
                self._pending = ""
                self._region = Region(buf[hit.pos:])
                if self._marks:
                    out.append(RegionOpened())
                return True
            buf = buf[hit.end:]
        safe = self._scanner.safe_len(buf)
        self._content(out, buf[:safe])
        self._pending = buf[safe:]
        return False

    def _step_region(self, out: list[StreamEvent]) -> bool:
        """Name early, and close the region once its format says so; True when it closed."""
        region = self._region
        assert region is not None
        self._announce(out, region)
        if not self._triggered(region):
            return False
        parsed = self._fmt.parse_region(region.text, at_end=False)
        if parsed is None and region.announced:
            end = self._promised_end(region, at_end=False)
            if end is None:
                return False
            self._keep_promise(out, region, end)
            self._region = None
            self._pending = region.text[end:]
            return True
        if parsed is None or parsed.end is None:
            region.closing = parsed is not None and parsed.closing
            return False
        self._dispatch(out, region, parsed, parsed.end)
        rest = region.text[parsed.end:]
        if parsed.continues:
            self._region = Region(rest)
        else:
            self._region = None
            self._pending = rest
        return True

    def _triggered(self, region: Region) -> bool:
        """Parse only when a closer arrived (or one did and the end is pending): linear cost."""
        window = region.take_window(self._closer_len - 1)
        if region.closing:
            return True
        return any(c in window for c in self._closers)

    def _announce(self, out: list[StreamEvent], region: Region) -> None:
        """Read the head once, when it is whole; a shorter region is named when it closes."""
        if region.head_done or region.size < Region.HEAD:
            return
        region.head_done = True
        parsed = self._fmt.parse_region(region.head, at_end=False)
        if parsed is None:
            return
        for call in parsed.calls:
            if not self._policy.may_announce(call.name):
                break
            index = self._take_index()
            call_id = call.id or self._new_id()
            region.announced.append((index, call_id, call.name))
            if self._marks and len(region.announced) == 1:
                out.append(CallFound())
            out.append(ToolCallStart(index, call_id, call.name))
        region.head_calls = parsed.calls[:len(region.announced)]

    def _promised_end(self, region: Region, at_end: bool) -> Optional[int]:
        """Where an announced region that no longer parses ends: its first closer past the head
        (one inside the head sat in a value the head still parsed), else the end of the text."""
        text = region.text
        ends = [p + len(c) for c in self._closers
                if (p := text.find(c, max(0, Region.HEAD - len(c) + 1))) >= 0]
        if ends:
            return min(ends)
        return len(text) if at_end else None

    def _keep_promise(self, out: list[StreamEvent], region: Region, end: int) -> None:
        self._markup(region.text[:end])
        for i in range(len(region.announced)):
            self._promised_args(out, region, i, end)

    def _promised_args(self, out: list[StreamEvent], region: Region, i: int, end: int) -> None:
        """An announced call the region's final parse does not deliver: what the head read of it
        if the head held it whole, else the raw text of the region."""
        call = region.head_calls[i]
        index = region.announced[i][0]
        if call.complete:
            out.append(ToolCallArgs(index, self._arguments(call)))
        else:
            out.append(ToolCallArgs(index, self._fmt.raw_arguments(region.text[:end])))

    def _dispatch(self, out: list[StreamEvent], region: Region, parsed: RegionParse,
                  end: int) -> None:
        self._content(out, region.text[:parsed.start])
        self._markup(region.text[parsed.start:end])
        if self._marks and parsed.calls and not region.announced:
            out.append(CallFound())
        for i, call in enumerate(parsed.calls):
            promised = region.announced[i] if i < len(region.announced) else None
            if promised is not None and promised[2] == call.name:
                out.append(ToolCallArgs(promised[0], self._arguments(call)))
                continue
            if promised is not None:
                self._promised_args(out, region, i, end)
            if not self._policy.may_dispatch(call.name):
                continue
            index = self._take_index()
            out.append(ToolCallStart(index, call.id or self._new_id(), call.name))
            out.append(ToolCallArgs(index, self._arguments(call)))
        for i in range(len(parsed.calls), len(region.announced)):
            self._promised_args(out, region, i, end)

    def _arguments(self, call: ParsedCall) -> str:
        """The JSON the client gets; a call whose arguments were not JSON keeps the raw text."""
        if call.raw_arguments is not None:
            return call.raw_arguments
        args = typed_arguments(call, self._policy.schemas.get(call.name, {}))
        return json.dumps(args, ensure_ascii=False)

    def _take_index(self) -> int:
        self._next_index += 1
        return self._next_index - 1

    def _content(self, out: list[StreamEvent], text: str) -> None:
        if not text:
            return
        self._code.feed(text)
        if self._trace is not None:
            self._trace.append(("content", text))
        if out and isinstance(out[-1], ContentDelta):
            out[-1] = ContentDelta(out[-1].text + text)
        else:
            out.append(ContentDelta(text))

    def _markup(self, text: str) -> None:
        if text and self._trace is not None:
            self._trace.append(("markup", text))


def read_whole(fmt: type[ToolFormat], text: str, policy: Optional[ToolPolicy] = None,
               new_id: Callable[[], str] = new_call_id) -> list[StreamEvent]:
    """The non-streaming read: the streaming engine over a single chunk."""
    reader = ToolCallStream(fmt, policy, new_id)
    return reader.feed(text) + reader.finish()
