"""What the engine core needs of an executor: run a step, say whether the device survived a
failure, and what it was built with. The builder hands the core one (atom/executor/)."""
from __future__ import annotations

from typing import Optional, Protocol

from atom.runner.scheduler_output import SchedulerOutput


class LaunchedStepProtocol(Protocol):
    def launch_failure(self) -> Optional[Exception]:
        """The exception the step's launch raised where it ran, or None. In one process a launch
        raises in the call; other ranks say so after it (asked once the step before resolved)."""

    def result(self) -> tuple[dict[int, list[int]], dict]:
        """(batch index → tokens kept, batch index → their logprob records); waits for it."""

    @property
    def rows(self) -> list[int]: ...

    # batch index → the drafts a runner-side drafter made for it (MTP), read after result()
    proposals: dict[int, list[int]]


class Executor(Protocol):
    num_blocks: int
    max_model_len: int
    vocab_size: int
    device_type: str  # "cuda" | "cpu": decides what async scheduling defaults to

    def execute(self, out: SchedulerOutput) -> LaunchedStepProtocol: ...

    def device_usable(self) -> bool: ...

    def start_profile(self) -> None: ...

    def stop_profile(self) -> None: ...

    def shutdown(self) -> None: ...
