"""A stand-in engine core that replays a fixed text as every request's output.

For end-to-end tests of the text path (detokenization, reasoning split, tool-call reading): the
model's real tokenizer turns `server.script_text` into the token ids a model would have produced,
and they come out one token per step, like decode steps of a real engine.
"""
from __future__ import annotations

from typing import Any, Optional

from atom.config.schema import Config
from atom.model_engine.synthetic_core import SyntheticEngineCore, _Seq


class ScriptedEngineCore(SyntheticEngineCore):
    def __init__(self, cfg: Config, tokenizer: Any) -> None:
        super().__init__(cfg, tokens_per_s=cfg.server.script_tokens_per_s)
        text = cfg.server.script_text or ""
        self._script: list[int] = list(tokenizer.encode(text, add_special_tokens=False))
        if not self._script:
            raise ValueError("server.script_text tokenizes to nothing; there is nothing to replay")

    def next_token(self, seq: _Seq) -> tuple[int, Optional[str]]:
        i = len(seq.emitted)
        return self._script[i], ("stop" if i + 1 >= len(self._script) else None)
