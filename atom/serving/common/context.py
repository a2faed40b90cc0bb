"""What every handler of one app shares: config, engine handle, tokenizer, delivery, metrics.

One instance per app (no module globals), so tests can run several apps in one process.
"""
from __future__ import annotations

import time
import uuid
from pathlib import PurePath
from dataclasses import dataclass, field
from typing import Any, Optional

from atom.config.schema import Config
from atom.serving.common.metrics import AtomMetricsExporter
from atom.serving.common.streaming_dispatch import SilenceWatchdog, StreamBatchDispatcher


def served_model_name(cfg: Config) -> str:
    """A model given by path is served under its last path component: a client may still send
    the full path (`model_aliases`), but no response shows the server's directory layout."""
    m = cfg.model
    return m.served_model_name or (PurePath(m.path).name if m.path else m.name)


def model_aliases(cfg: Config) -> tuple[str, ...]:
    """Names a client may send for the loaded model: the served name, the config entry, the path."""
    m = cfg.model
    return tuple(n for n in (served_model_name(cfg), m.name, m.path) if n)


@dataclass
class ServerContext:
    cfg: Config
    client: Any  # EngineClient (or a test double with the same surface)
    tokenizer: Any
    watchdog: SilenceWatchdog
    metrics: AtomMetricsExporter
    dispatcher: Optional[StreamBatchDispatcher] = None  # bound to the loop at startup
    model_name: str = ""
    aliases: tuple[str, ...] = ()
    created: int = field(default_factory=lambda: int(time.time()))
    _token_text: dict[int, str] = field(default_factory=dict)

    @property
    def max_model_len(self) -> int:
        return int(self.client.max_model_len or self.cfg.model.max_model_len or 0)

    @staticmethod
    def created_now() -> int:
        return int(time.time())

    @staticmethod
    def new_id(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    def token_text(self, token_id: int) -> str:
        """A token's text for logprob listings (cached: the same ids recur constantly)."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            if len(self._token_text) < 1 << 18:
                self._token_text[token_id] = text
        return text
