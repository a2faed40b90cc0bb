"""The bounds every request field of both wires is decoded under (msgspec `Meta`): a value out
of them is a 400 naming the field before any handler runs."""
from __future__ import annotations

from typing import Annotated, Any, Union

from msgspec import Meta

NonNegFloat = Annotated[float, Meta(ge=0.0, le=1e4)]
Probability = Annotated[float, Meta(gt=0.0, le=1.0)]
UnitInterval = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
# Integers are bounded so nothing a client sends can overflow the engine's 64-bit fields.
PositiveInt = Annotated[int, Meta(ge=1, le=2**31 - 1)]
NonNegInt = Annotated[int, Meta(ge=0, le=2**31 - 1)]
TopK = Annotated[int, Meta(ge=-1, le=2**31 - 1)]
# Choice i samples with seed + i, and n is at most 128: the sum must stay inside int64.
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1 - 256)]
TokenId = Annotated[int, Meta(ge=0, le=2**31 - 1)]
NumChoices = Annotated[int, Meta(ge=1, le=128)]
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
LogitBias = dict[Annotated[str, Meta(pattern=r"^[0-9]{1,10}$")], Annotated[float, Meta(ge=-100.0, le=100.0)]]
# Stop strings: matching costs the same whatever their number (stop_strings.py), but the request's
# automaton is built on the event loop (64 × 256 characters: ~20 ms) and withheld text can be as
# long as the longest one, so both are bounded.
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 256
StopString = Annotated[str, Meta(max_length=MAX_STOP_CHARS)]
StopList = Annotated[list[StopString], Meta(max_length=MAX_STOP_STRINGS)]
StopField = Union[StopString, StopList, None]
StopTokenIds = Annotated[list[TokenId], Meta(max_length=1024)]
# A JSON Schema of an object (a tool's parameters), kept as a plain dict: the templates and the
# tool reader take it as such.
SCHEMA_OBJECT = {"type": "object", "properties": {"type": {"enum": ["object"]}}}
JsonSchemaObject = Annotated[dict[str, Any], Meta(extra_json_schema=SCHEMA_OBJECT)]
