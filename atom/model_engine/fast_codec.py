"""A tokenizer view whose encode/decode call the Rust `tokenizers` backend directly.

The API process decodes every generated token (twice: the incremental detokenizer compares a
prefix and a full window) and encodes every prompt. transformers' Python wrapper around the same
backend costs 3-4x the backend call itself (argument normalisation, dict building), which at a
thousand streams is a large share of the event loop's CPU. The shortcut is taken only when it
reproduces the wrapper's output on probes, so text never changes; everything else is delegated.
"""
from __future__ import annotations

from typing import Any

_PROBE_TEXT = "Hello, world! The capital of France is Paris.\n  def f(x): return x < 2  # ünïcödé 你好"


class FastCodec:
    def __init__(self, tokenizer: Any, backend: Any) -> None:
        self._tok = tokenizer
        self._backend = backend

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs:
            return self._tok.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if kwargs:
            return self._tok.decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def __len__(self) -> int:
        return len(self._tok)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    @property
    def wrapped(self) -> Any:
        return self._tok


def fast_codec(tokenizer: Any) -> Any:
    """`tokenizer` with the fast path when it is provably equivalent, else `tokenizer` itself."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return tokenizer
    fast = FastCodec(tokenizer, backend)
    try:
        for special in (True, False):
            if fast.encode(_PROBE_TEXT, special) != list(tokenizer.encode(_PROBE_TEXT, add_special_tokens=special)):
                return tokenizer
        ids = list(tokenizer.encode(_PROBE_TEXT, add_special_tokens=True))
        probes = [ids, ids[3:9], list(range(min(len(tokenizer), 300)))]
        special_ids = list(getattr(tokenizer, "all_special_ids", []) or [])[:8]
        probes.append(ids[:4] + special_ids + ids[4:8])
        for p in probes:
            for skip in (True, False):
                if fast.decode(p, skip) != tokenizer.decode(p, skip_special_tokens=skip):
                    return tokenizer
    except Exception:  # any disagreement in shape or behaviour: keep the wrapper
        return tokenizer
    return fast
