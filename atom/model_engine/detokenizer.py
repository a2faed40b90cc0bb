"""Incremental detokenization that never emits half a UTF-8 character.

Decoding one token at a time is wrong for byte-level BPE (a character can span tokens) and for
SentencePiece (a token's leading space depends on its left neighbour), so each step decodes a short
window that starts a few tokens back and emits only the part that is new and complete.
"""
from __future__ import annotations

from typing import Any

_REPLACEMENT = "\ufffd"
_WINDOW = 6  # tokens of left context used to decode the next piece


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids[-_WINDOW:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_ids: list[int]) -> str:
        """Add generated tokens; return the newly complete text (maybe empty)."""
        out = []
        for t in token_ids:
            self._ids.append(t)
            prefix = self._decode(self._ids[self._prefix_offset:self._read_offset])
            full = self._decode(self._ids[self._prefix_offset:])
            if len(full) > len(prefix) and not full.endswith(_REPLACEMENT):
                out.append(full[len(prefix):])
                self._prefix_offset = self._read_offset
                self._read_offset = len(self._ids)
        self._compact()
        return "".join(out)

    def flush(self) -> str:
        """At end of stream: whatever is left, replacement characters included."""
        prefix = self._decode(self._ids[self._prefix_offset:self._read_offset])
        full = self._decode(self._ids[self._prefix_offset:])
        self._prefix_offset = self._read_offset = len(self._ids)
        return full[len(prefix):] if len(full) > len(prefix) else ""

    def _compact(self) -> None:
        if self._prefix_offset > 4 * _WINDOW:
            drop = self._prefix_offset
            self._ids = self._ids[drop:]
            self._prefix_offset -= drop
            self._read_offset -= drop
