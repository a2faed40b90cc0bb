"""A GGUF file's leading metadata keys, read without parsing the rest of the header.

Validation needs three keys (architecture and head counts) that GGUF writers put before the
tokenizer's arrays; gguf.GGUFReader parses every field, the ~50k-entry vocabulary included, which
took 4.9 s for SmolLM2's file on a 2-core host — serial start-up time in the API process, before
the engine core is even launched. This reads key/value pairs in order and stops at the last key
asked for (format: github.com/ggml-org/ggml/blob/master/docs/gguf.md).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO, Iterable

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "<Q")).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int, keep: bool) -> Any:
    """The value (or, with keep=False, skipped past without decoding where possible)."""
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind != _ARRAY:
        raise ValueError(f"unknown GGUF value type {kind}")
    elem, count = _read(f, "<I"), _read(f, "<Q")
    if not keep and elem in _SCALARS:
        f.seek(count * struct.calcsize(_SCALARS[elem]), 1)
        return None
    return [_value(f, elem, keep) for _ in range(count)]


def read_metadata(path: Path, keys: Iterable[str]) -> dict[str, Any]:
    """The values of `keys` that the file has (absent keys are left out)."""
    wanted, found = set(keys), {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        if _read(f, "<I") < 2:
            raise ValueError(f"{path}: GGUF version 1 is not supported")
        _read(f, "<Q")  # tensor count
        for _ in range(_read(f, "<Q")):
            key, kind = _string(f), _read(f, "<I")
            value = _value(f, kind, key in wanted)
            if key in wanted:
                found[key] = value
                if len(found) == len(wanted):
                    break
    return found
