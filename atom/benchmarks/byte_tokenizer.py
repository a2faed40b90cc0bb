"""One token per byte: the benchmark-side twin of the stand-in tokenizer atom serves a
dummy-weight model with (no tokenizer files exist for it).

Without it a random prompt "of 1024 tokens" made with any real tokenizer reaches such a server as
several thousand byte tokens, and the workload silently changes. Prompts are drawn from printable
ASCII, so every character is exactly one token on both sides.
"""
from __future__ import annotations

from typing import Any, Optional

PRINTABLE = range(32, 127)


class ByteLevelTokenizer:
    """The subset of the transformers tokenizer API the benchmark uses."""

    chat_template: Optional[str] = None
    # Not special to the server: listed so random prompts never draw a non-printable byte.
    all_special_ids = [i for i in range(256) if i not in PRINTABLE]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def __call__(self, text: str, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def __len__(self) -> int:
        return 256
