"""Reading a GGUF file once: parsing its header (the vocabulary alone is ~100k fields) costs
seconds, so one parsed reader per file and modification time is kept for the process."""
from __future__ import annotations

import functools
import os
from typing import Any

@functools.lru_cache(maxsize=2)
def _reader(path: str, mtime: float) -> Any:
    from gguf import GGUFReader  # numpy and the gguf package: only a GGUF model pays for them

    return GGUFReader(path)


def reader(path: str) -> Any:
    return _reader(str(path), os.path.getmtime(path))


def field(r: Any, key: str) -> Any:
    f = r.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    return bytes(v).decode() if v.dtype.kind == "u" and v.dtype.itemsize == 1 else v.tolist()[0]


def architecture(r: Any) -> str:
    return field(r, "general.architecture")
