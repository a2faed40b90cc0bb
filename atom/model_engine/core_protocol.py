"""The engine-core interface: what LLMEngine and the server's client drive.

Implemented by EngineCore (the real model), and by the synthetic and scripted sources the server
uses to measure or test the serving layer alone. Token ids in, token ids out: text is the
OutputProcessor's job, on the caller's side.
"""
from __future__ import annotations

from typing import Protocol

from atom.model_engine.messages import EngineRequest, EngineStats, StepOutput


class EngineCoreProtocol(Protocol):
    def add_request(self, request: EngineRequest) -> None: ...

    def abort_requests(self, request_ids: list[str]) -> None:
        """Finish these now; their KV blocks are free before the next step runs."""

    def step(self) -> list[StepOutput]:
        """Run one scheduling step; one StepOutput per request that advanced or finished."""

    def has_unfinished(self) -> bool: ...

    def stats(self) -> EngineStats: ...

    def start_profile(self) -> None: ...

    def stop_profile(self) -> None: ...

    def shutdown(self) -> None: ...
