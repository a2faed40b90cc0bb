"""`serve(cfg)`: engine core in its own process, then the Litestar app on uvicorn, blocking.

The HTTP port is checked before anything loads (a busy port found after a minute of model
loading wastes the minute), and the embedded model is fetched here, once, before the core starts:
the core and this process's tokenizer then both find it cached, and its log lines appear once.
The core process is started (and the model loaded) before the socket is bound, so a client that
can connect is talking to a server that can answer; `/health` says 503 from then on if the core dies.
"""
from __future__ import annotations

import logging
import socket

import uvicorn

from atom.builder import build_app
from atom.config.errors import ConfigError
from atom.config.schema import Config, ParallelConfig
from atom.core_process import run_core
from atom.loader.hf_config import model_source
from atom.log_setup import configure_logging

log = logging.getLogger("atom.server")


def _port_flag_hint(cfg: Config) -> str:
    """vLLM's `--port` is the HTTP port; the spec's is the engine's internal one."""
    if cfg.parallel.engine_port == ParallelConfig().engine_port:
        return ""
    return (f" (--port {cfg.parallel.engine_port} set parallel.engine_port, the engine's internal "
            f"port; the HTTP port is --server-port / server.port)")


def check_port_free(cfg: Config) -> None:
    """Bind the HTTP address as uvicorn will (SO_REUSEADDR) and release it at once."""
    host, port = cfg.server.host, cfg.server.port
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
    except OSError as e:
        raise ConfigError("server.port", port, f"cannot listen on {host}:{port}: "
                          f"{e.strerror or e}{_port_flag_hint(cfg)}") from None


def serve(cfg: Config) -> None:
    configure_logging()
    check_port_free(cfg)
    model_source(cfg)  # the embedded model's one fetch (when it is not cached yet)
    app = build_app(cfg, run_core)
    s = cfg.server
    log.info("serving %s on http://%s:%d%s", app.state.ctx.model_name, s.host, s.port,
             _port_flag_hint(cfg))
    try:
        # log_config=None: uvicorn's lines go through atom's handler, in atom's one format
        uvicorn.run(app, host=s.host, port=s.port, timeout_keep_alive=s.timeout_keep_alive,
                    access_log=not s.disable_uvicorn_access_log, log_level="info", lifespan="on",
                    log_config=None)
    finally:
        app.state.ctx.client.close()  # idempotent; covers a failed bind, where no shutdown hook ran
