"""The block-table delta codec (atom/executor/block_table_deltas.py) over the real wire: every
step is cut by the driver's TableSender, msgpack-encoded as a RunStep, decoded as a rank decodes
it and restored by a TableKeeper, and the runner must then see exactly the tables the scheduler
made, through growth across block boundaries, a preempted request's new blocks, finished and
reused ids, and a step that never reached the rank (the driver forgets, tables go whole).
The engine-level paths (tp=1 and tp=2 against one process): test_multiproc_block_tables.py."""
from __future__ import annotations

import random

import msgspec
import pytest

from atom.executor.block_table_deltas import WHOLE, TableKeeper, TablesOutOfStep, TableSender
from atom.executor.worker_ipc import RunStep, ToWorker
from atom.runner.scheduler_output import ScheduledRequest, SchedulerOutput

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(ToWorker).decode


def _step(tables: dict[str, list[int]], finished: list[str] = ()) -> SchedulerOutput:
    reqs = [ScheduledRequest(rid, 0, [-1], t, 1) for rid, t in tables.items()]
    return SchedulerOutput([], reqs, list(finished))


def _send(sender: TableSender, out: SchedulerOutput) -> tuple[bytes, list[int]]:
    msg = RunStep(*sender.cut(out))
    return _encode(msg), msg.table_starts


def _arrive(keeper: TableKeeper, frame: bytes) -> dict[str, list[int]]:
    msg = _decode(frame)
    return {r.request_id: list(r.block_table)
            for r in keeper.restore(msg.out, msg.table_starts).requests}


def test_tables_that_grow_are_sent_once_then_only_their_new_blocks():
    sender, keeper = TableSender(), TableKeeper()
    tables = {"a": [3], "b": [7, 8]}
    frame, starts = _send(sender, _step(tables))
    assert starts == [WHOLE, WHOLE]
    assert _arrive(keeper, frame) == tables
    tables["a"].append(9)  # "a" crosses a block boundary, "b" does not
    frame, starts = _send(sender, _step(tables))
    assert starts == [1, 2]
    sent = _decode(frame).out.requests
    assert [r.block_table for r in sent] == [[9], []]
    assert _arrive(keeper, frame) == tables


def test_a_rewritten_table_goes_whole_and_replaces_the_held_one():
    sender, keeper = TableSender(), TableKeeper()
    tables = {"a": [1, 2, 3], "b": [4]}
    _arrive(keeper, _send(sender, _step(tables))[0])
    tables["a"] = [5, 2]  # preempted: freed, then new blocks (shorter, not a prefix)
    frame, starts = _send(sender, _step(tables))
    assert starts == [WHOLE, 1]
    assert _arrive(keeper, frame) == tables
    tables["a"] = [5, 2, 6]  # and grows from its new table on
    frame, starts = _send(sender, _step(tables))
    assert starts == [2, 1]
    assert _arrive(keeper, frame) == tables


def test_finished_requests_are_forgotten_first_so_a_reused_id_starts_whole():
    sender, keeper = TableSender(), TableKeeper()
    _arrive(keeper, _send(sender, _step({"a": [1, 2], "b": [3]}))[0])
    frame, starts = _send(sender, _step({"a": [1, 2, 4]}, finished=["a", "b"]))
    assert starts == [WHOLE]
    assert _arrive(keeper, frame) == {"a": [1, 2, 4]}
    assert len(sender) == len(keeper) == 1


def test_after_a_step_that_never_arrived_the_driver_forgets_and_whole_tables_heal_the_rank():
    sender, keeper = TableSender(), TableKeeper()
    tables = {"a": [1], "b": [2]}
    _arrive(keeper, _send(sender, _step(tables))[0])
    tables["a"].append(3)
    _send(sender, _step(tables))  # raised before the rank took it (decode or encode failed)
    tables["a"].append(4)
    tables["b"].append(5)
    frame, _ = _send(sender, _step(tables))
    with pytest.raises(TablesOutOfStep):  # the rank missed a block: without the fallback
        _arrive(keeper, frame)
    sender.forget()
    frame, starts = _send(sender, _step(tables))
    assert starts == [WHOLE, WHOLE]
    assert _arrive(keeper, frame) == tables


def test_an_extension_of_a_table_the_rank_lacks_is_refused_not_guessed():
    keeper = TableKeeper()
    bad = RunStep(_step({"a": [9]}), [2])
    with pytest.raises(TablesOutOfStep):
        keeper.restore(_decode(_encode(bad)).out, [2])
    with pytest.raises(TablesOutOfStep):
        keeper.restore(_step({"a": [9]}), [])


def test_random_steps_round_trip_and_shrink_the_frame():
    """Many requests over many steps, each step growing some tables by a block, preempting a
    few (new blocks), finishing some and admitting others: every restored table is the
    scheduler's, and a steady step's frame is a fraction of the whole-table frame."""
    rng = random.Random(3)
    sender, keeper = TableSender(), TableKeeper()
    tables: dict[str, list[int]] = {}
    next_id, next_block = 0, 0
    sizes = []
    for step in range(200):
        finished = [rid for rid in tables if rng.random() < 0.02]
        for rid in finished:
            del tables[rid]
        while len(tables) < 64:
            n = rng.randint(1, 40)
            tables[f"r{next_id}"], next_id, next_block = (
                list(range(next_block, next_block + n)), next_id + 1, next_block + n)
        for rid, t in tables.items():
            if rng.random() < 1 / 16:
                t.append(next_block)
                next_block += 1
            elif rng.random() < 0.01:
                tables[rid] = [next_block + i for i in range(rng.randint(1, len(t) + 3))]
                next_block += len(tables[rid])
        if step == 100:
            sender.forget()
        out = _step(tables, finished)
        frame, _ = _send(sender, out)
        assert _arrive(keeper, frame) == tables, step
        sizes.append((len(frame), len(_encode(RunStep(out, [WHOLE] * len(tables))))))
    assert len(sender) == len(keeper) == len(tables)
    steady = sizes[150]
    assert steady[0] < steady[1] / 3, steady
