"""Read a local Hugging Face-style dataset into plain dict records, without any download.

The `datasets` package is optional: with it, a `save_to_disk` directory (or a DatasetDict's
split) loads; without it, JSON and JSONL files — the formats such datasets are usually exported
to — still work.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Optional

PROMPT_KEYS = ("prompt", "question", "instruction", "input", "text", "query")
COMPLETION_KEYS = ("completion", "response", "output", "answer", "chosen")


def _read_json_file(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if isinstance(data, dict):  # {"train": [...]} or {"data": [...]}
        data = next((v for v in data.values() if isinstance(v, list)), [])
    return list(data)


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / n).exists() for n in ("dataset_info.json", "dataset_dict.json", "state.json"))


def _load_saved(path: Path, split: str) -> list[dict[str, Any]]:
    if importlib.util.find_spec("datasets") is None:
        raise RuntimeError(f"{path} is a saved `datasets` directory, but the `datasets` package is "
                           "not installed; export it to JSONL or install `datasets`")
    import datasets  # optional dependency

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        ds = ds[split]
    return [dict(r) for r in ds]


def load_hf_records(path: Path, split: str = "train") -> list[dict[str, Any]]:
    """`path`: a saved dataset dir, a .json/.jsonl file, or a dir of those (a `<split>.*` file
    is preferred when present)."""
    if _is_saved_dataset(path):
        return _load_saved(path, split)
    if path.is_file():
        return _read_json_file(path)
    files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
    preferred = [p for p in files if p.stem.startswith(split)]
    records: list[dict[str, Any]] = []
    for f in preferred or files:
        records.extend(_read_json_file(f))
    if not records:
        raise ValueError(f"hf dataset: no JSON/JSONL records under {path}")
    return records


def _first(rec: dict[str, Any], keys: tuple[str, ...]) -> Optional[str]:
    return next((rec[k] for k in keys if isinstance(rec.get(k), str) and rec[k]), None)


def record_pair(rec: dict[str, Any]) -> Optional[tuple[str, Optional[str]]]:
    """(prompt, completion or None) from ShareGPT-, chat- or instruction-shaped records."""
    turns = rec.get("conversations")
    if isinstance(turns, list) and turns:
        text = [t.get("value") or t.get("content") or "" for t in turns]
        return text[0], text[1] if len(text) > 1 else None
    messages = rec.get("messages")
    if isinstance(messages, list) and messages:
        user = next((m["content"] for m in messages if m.get("role") == "user"), None)
        reply = next((m["content"] for m in messages if m.get("role") == "assistant"), None)
        return (user, reply) if user else None
    prompt = _first(rec, PROMPT_KEYS)
    return (prompt, _first(rec, COMPLETION_KEYS)) if prompt else None
