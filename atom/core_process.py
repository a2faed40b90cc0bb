"""The engine-core process's entry point: build the core from the config, say ready, run the loop.

A module above the builder (it wires the core), so the engine packages never import the builder:
EngineClient is handed this function by whoever builds the server (atom/builder.py).
"""
from __future__ import annotations

import logging
import os
import signal
import traceback
from typing import Any

import msgspec
import zmq

from atom.builder import build_core
from atom.config.errors import ConfigError
from atom.config.schema import Config
from atom.log_setup import configure_logging
from atom.model_engine.core_ipc import CoreFailed, CoreReady, StepBatch
from atom.model_engine.core_loop import CoreLoop
from atom.runner.cpu_threads import cpu_threads

log = logging.getLogger("atom.core")


def _exit_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def run_core(cfg: Config, in_addr: str, out_addr: str, parent_pid: int) -> None:
    """Process entry point (spawned by EngineClient). A SIGTERM or Ctrl-C sent to the whole
    process group (timeout, systemd, a terminal) exits through the `finally` below and Python's
    own shutdown, like the API's shutdown call: killed outright, the core leaked the semaphore
    tqdm's lock holds, which the resource tracker then reported at exit."""
    configure_logging()
    signal.signal(signal.SIGTERM, _exit_quietly)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.connect(out_addr)
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    pull.bind(in_addr)  # binds so that every PUSH of the API process (requests, stop aborts) reaches it
    encode = msgspec.msgpack.Encoder().encode
    core = None
    try:
        cfg.runtime.cpu_threads = cpu_threads(cfg.runtime.cpu_threads, serving=True)
        core = build_core(cfg)  # a model core loads its tokenizer only for an EOS id it lacks
        max_len = int(getattr(core, "max_model_len", None) or cfg.model.max_model_len or 0)
        push.send(encode(CoreReady(os.getpid(), max_len)))
        push.send(encode(StepBatch([], core.stats())))  # the pool as it starts, before any request
        CoreLoop(cfg, core, pull, push, parent_pid).run()
    except (SystemExit, KeyboardInterrupt):  # asked to stop: not a failure
        raise SystemExit(0)
    except ConfigError as exc:  # the launcher prints it as its one line
        log.error("engine core failed: %s", exc)
        push.send(encode(CoreFailed(str(exc), (exc.field, repr(exc.value), exc.rule))))
        raise SystemExit(1)
    except BaseException as exc:  # the API side turns this into 503s and failed streams
        log.error("engine core failed: %s", exc)
        push.send(encode(CoreFailed(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")))
        raise SystemExit(1)
    finally:
        if core is not None:
            try:
                core.shutdown()
            except Exception:
                log.exception("engine core shutdown failed")
        pull.close(0)
        push.close()
        ctx.term()
