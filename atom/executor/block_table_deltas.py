"""Each request's block table sent to the ranks once, then only the blocks it gained.

A decode step's frame at 256 sequences of 1k tokens is 61 KB, 13 KB without its block
tables, and a rank decodes it in 0.32 ms, 0.084 ms with the tables as deltas
(research/probes/step_transport.py, 2 CPU cores); yet between two steps a table gains a block
once every block_size tokens. So the driver keeps a copy of what the ranks hold of each table
and sends, per request, where the unsent part starts and that part only (vLLM V1's cached
request data does the same); each rank keeps the tables and hands its runner whole ones, as the
runner in the engine's own process gets them. Comparing each table with the copy costs the
driver about what encoding the whole tables did (~0.3 us a request).

A table the ranks hold that is not a prefix of the new one (the request was preempted and got
new blocks) is sent whole. The two sides stay equal only while every step reaches every rank:
when the driver cannot be sure a rank applied a step (its encode or a rank's decode or launch
raised) it forgets everything and sends whole tables, which replace whatever a rank held.
"""
from __future__ import annotations

import msgspec

from atom.runner.scheduler_output import SchedulerOutput

WHOLE = 0  # a start of 0: the table is sent whole and replaces what a rank held


class TablesOutOfStep(RuntimeError):
    """A step extends a table the rank does not hold at that length: the driver's record and
    the rank's differ (the step fails on every rank alike, and the driver then sends whole)."""


class TableSender:
    """The driver's side: a copy of every table as the ranks hold it."""

    def __init__(self) -> None:
        self._held: dict[str, list[int]] = {}

    def cut(self, out: SchedulerOutput) -> tuple[SchedulerOutput, list[int]]:
        """`out` with each table cut to what the ranks lack, and where each cut part starts.
        Requests in `finished_ids` are forgotten first, as the ranks do (an id may be reused
        by a request scheduled in the same step)."""
        for rid in out.finished_ids:
            self._held.pop(rid, None)
        held_of, replace = self._held.get, msgspec.structs.replace
        reqs, starts = [], []
        for r in out.requests:
            table, held = r.block_table, held_of(r.request_id)
            if held is not None:
                n = len(held)
                if len(table) == n:
                    if table == held:
                        starts.append(n)
                        reqs.append(replace(r, block_table=[]))
                        continue
                elif table[:n] == held:
                    tail = table[n:]
                    held += tail
                    starts.append(n)
                    reqs.append(replace(r, block_table=tail))
                    continue
            self._held[r.request_id] = table[:]
            starts.append(WHOLE)
            reqs.append(r)
        return replace(out, requests=reqs), starts

    def forget(self) -> None:
        """A step may not have reached every rank: from now on every table goes whole."""
        self._held.clear()

    def __len__(self) -> int:
        return len(self._held)


class TableKeeper:
    """A rank's side: every live request's whole table."""

    def __init__(self) -> None:
        self._tables: dict[str, list[int]] = {}

    def restore(self, out: SchedulerOutput, starts: list[int]) -> SchedulerOutput:
        """`out` (decoded here, so changed in place) with whole tables again. A held table is
        extended in place, as the engine's scheduler extends a sequence's own list for a runner
        in its process."""
        for rid in out.finished_ids:
            self._tables.pop(rid, None)
        if len(starts) != len(out.requests):
            raise TablesOutOfStep(f"{len(starts)} table starts for {len(out.requests)} requests")
        for r, start in zip(out.requests, starts):
            if start == WHOLE:
                self._tables[r.request_id] = r.block_table
                continue
            held = self._tables.get(r.request_id)
            if held is None or len(held) != start:
                raise TablesOutOfStep(
                    f"request {r.request_id!r}: the step extends its table from block {start}, "
                    f"this rank holds {'none' if held is None else len(held)}")
            held.extend(r.block_table)
            r.block_table = held
        return out

    def __len__(self) -> int:
        return len(self._tables)
