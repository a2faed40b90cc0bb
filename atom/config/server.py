"""The `server` group: the HTTP front end."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ServerConfig:
    host: str = "0.0.0.0"  # the HTTP server's address
    port: int = 8000  # the HTTP port (the spec launcher's --server-port; its --port is the engine's)
    timeout_keep_alive: int = 5  # seconds an idle HTTP connection is kept open
    disable_uvicorn_access_log: bool = False  # no log line per HTTP request
    api_key: Optional[str] = None  # when set, requests need `Authorization: Bearer <key>`
    # Engine behind the server: "model" runs the configured model; "synthetic" emits tokens at a
    # fixed rate so only the serving layer is measured; "scripted" replays `script_text`.
    engine_source: str = "model"
    synthetic_tokens_per_s: float = 50.0  # per stream; one engine step every 1/rate s
    synthetic_token_ids: Optional[list[int]] = None  # ids the synthetic core cycles through
    script_text: Optional[str] = None  # the text the scripted core replays, token by token
    script_tokens_per_s: float = 500.0  # 0 = as fast as the core loop turns
    # Seconds a stream may go without a frame before a line naming the request is logged.
    silence_log_threshold_s: float = 30.0
    # Seconds to wait for the engine core to load and report ready (0 = wait as long as it lives).
    engine_ready_timeout_s: float = 0.0
    stop_profile_timeout_s: Optional[float] = None  # None: ATOM_PROFILER_TIMEOUT, else 300
    # Seconds the engine core may stay silent (no step, no idle heartbeat) before /health
    # reports it stalled with a 503; 0 = never. Above the longest step the model may take.
    core_silence_timeout_s: float = 60.0
    max_prompt_chars_per_token: int = 16  # prompts longer than max_model_len × this many characters are refused (400) before tokenizing
    chat_template_timeout_s: float = 10.0  # a chat-template render still running after this many seconds fails its request (400)
    max_sequences_per_request: int = 1024  # prompts × n one request may ask for; more is a 400
    profile_max_s: float = 60.0  # a started torch-profiler trace is stopped by the server after this many seconds
    profile_max_dir_bytes: int = 1 << 30  # /start_profile is refused (507) while the trace directory holds this many bytes
