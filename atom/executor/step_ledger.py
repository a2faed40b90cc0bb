"""What the multi-process executor knows of the steps it sent: rank 0's answers, in step order,
and every rank's word on whether a step launched (worker_ipc.Launched).

Rank 0 says of each step whether it launched, before it answers the step before; another rank
speaks only when its launch raised. A step whose launch raised on every rank gets no answer and
changed nothing there, so the engine can isolate its request; one that raised on some ranks only
leaves the others inside a collective without them, and nothing can run again.
"""
from __future__ import annotations

from typing import Optional

from atom.executor.worker_ipc import Launched, StepResult


class RanksOutOfStep(RuntimeError):
    """Some ranks raised launching a step that others launched."""


class StepLedger:
    def __init__(self) -> None:
        self.answered = 0  # the last step whose answer arrived (or that will get none)
        self._results: dict[int, StepResult] = {}
        self._rowless: set[int] = set()  # steps that sample nothing: their answer is dropped
        self._launched: dict[int, Optional[str]] = {}  # step → rank 0's launch error, or None
        self._raised: dict[int, set[int]] = {}  # step → the ranks whose launch raised
        self._failed: set[int] = set()  # steps rank 0 raised: no answer will come
        self._rank0_seen = 0  # the last step rank 0 said it launched or raised

    def kept(self) -> dict[str, int]:
        """What the books hold: answers nobody took, rowless steps not yet answered, launch
        statuses and raise reports (a steady engine keeps at most one of each in flight)."""
        return {"answers": len(self._results), "rowless": len(self._rowless),
                "statuses": len(self._launched), "raised": len(self._raised)}

    def sent_rowless(self, number: int) -> None:
        self._rowless.add(number)

    def take(self, msg: Launched | StepResult) -> None:
        if isinstance(msg, StepResult):
            n = self.answered + 1
            while n in self._failed:
                self._failed.discard(n)
                n += 1
            self.answered = n
            if n in self._rowless:
                self._rowless.discard(n)
            else:
                self._results[n] = msg
            return
        m = msg.number
        if msg.rank == 0:
            self._launched[m], self._rank0_seen = msg.error, m
            if msg.error is not None:
                self._failed.add(m)
        if msg.error is not None:
            self._raised.setdefault(m, set()).add(msg.rank)
        if m <= self._rank0_seen and self._raised.get(m) and 0 not in self._raised[m]:
            raise RanksOutOfStep(f"step {m} raised on ranks {sorted(self._raised[m])} but not "
                                 "on rank 0: the ranks are out of step")

    def result(self, number: int) -> Optional[StepResult]:
        """Step `number`'s answer once it arrived (statuses of steps up to it are dropped: the
        engine asked about them, or never will)."""
        if self.answered < number:
            return None
        for old in [n for n in self._launched if n <= number]:
            del self._launched[old]
        return self._results.pop(number)

    def launched(self, number: int) -> tuple[bool, Optional[str]]:
        """(whether rank 0 has spoken of step `number`, its launch error or None)."""
        if number not in self._launched:
            return False, None
        return True, self._launched[number]

    def raised_everywhere(self, number: int, world_size: int) -> bool:
        """Whether every rank has said step `number` raised (then forgotten)."""
        if len(self._raised.get(number, ())) < world_size:
            return False
        del self._raised[number]
        self._launched.pop(number, None)
        return True
