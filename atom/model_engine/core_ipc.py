"""The envelopes that cross the API-process / core-process boundary, and their codecs.

One tagged union per direction so each side decodes with one typed decoder (no dict detour), and so
an engine step's whole output is one message: the API side wakes once per step, not per token.
"""
from __future__ import annotations

from typing import Optional, Union

import msgspec

from atom.model_engine.messages import EngineRequest, EngineStats, StepOutput


class AddRequests(msgspec.Struct, tag="add"):
    requests: list[EngineRequest]


class AbortRequests(msgspec.Struct, tag="abort"):
    request_ids: list[str]


class ControlCall(msgspec.Struct, tag="call"):
    """start_profile | stop_profile | shutdown; answered by a ControlReply with the same id."""

    call_id: int
    op: str


class CoreReady(msgspec.Struct, tag="ready"):
    pid: int
    max_model_len: int


class StepBatch(msgspec.Struct, tag="step"):
    """Everything one engine step produced, plus the stats after it."""

    outputs: list[StepOutput]
    stats: EngineStats


class ControlReply(msgspec.Struct, tag="reply"):
    call_id: int
    ok: bool
    error: Optional[str] = None


class CoreFailed(msgspec.Struct, tag="failed"):
    message: str
    # A config the core found it cannot run (e.g. a KV budget short of one sequence, known only
    # once the weights are in memory): (field, value shown, rule), for the launcher's one line.
    config_error: Optional[tuple[str, str, str]] = None


class Heartbeat(msgspec.Struct, tag="beat"):
    """Sent by an idle core, so that silence from the core always means it is stuck."""


ToCore = Union[AddRequests, AbortRequests, ControlCall]
FromCore = Union[CoreReady, StepBatch, ControlReply, CoreFailed, Heartbeat]

CONTROL_OPS = ("start_profile", "stop_profile", "shutdown")


def to_core_decoder() -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(ToCore)


def from_core_decoder() -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(FromCore)
