"""One log format for every atom process (launcher, API server, engine core, examples): a line
reads the same whichever process wrote it."""
from __future__ import annotations

import logging

FORMAT = "%(levelname)s %(asctime)s %(name)s: %(message)s"


def configure_logging(level: int = logging.INFO) -> None:
    """Idempotent: a process that already has handlers (a test runner, an embedding app) keeps
    them, so no line is written twice."""
    logging.basicConfig(level=level, format=FORMAT)
