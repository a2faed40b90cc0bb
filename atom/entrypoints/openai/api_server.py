"""`serve(cfg)`: engine core in its own process, then the Litestar app on uvicorn, blocking.

The core process is started (and the model loaded) before the socket is bound, so a client that
can connect is talking to a server that can answer; `/health` says 503 from then on if the core dies.
"""
from __future__ import annotations

import logging

from atom.config.schema import Config

log = logging.getLogger("atom.server")


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(name)s: %(message)s")


def serve(cfg: Config) -> None:
    import uvicorn

    from atom.builder import build_app

    configure_logging()
    app = build_app(cfg)
    s = cfg.server
    log.info("serving %s on http://%s:%d", app.state.ctx.model_name, s.host, s.port)
    try:
        uvicorn.run(app, host=s.host, port=s.port, timeout_keep_alive=s.timeout_keep_alive,
                    access_log=not s.disable_uvicorn_access_log, log_level="info", lifespan="on")
    finally:
        app.state.ctx.client.close()  # idempotent; covers a failed bind, where no shutdown hook ran
