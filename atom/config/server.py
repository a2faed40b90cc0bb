"""The `server` group: the HTTP front end."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = 8000
    timeout_keep_alive: int = 5
    disable_uvicorn_access_log: bool = False
    api_key: Optional[str] = None
    # Engine behind the server: "model" runs the configured model; "synthetic" emits tokens at a
    # fixed rate so only the serving layer is measured; "scripted" replays `script_text`.
    engine_source: str = "model"
    synthetic_tokens_per_s: float = 50.0
    script_text: Optional[str] = None
