"""The only place that turns a Config into objects: tokenizer, scheduler, proposer, executor,
engine core, app (an in-process LLMEngine, above this layer, asks it for its core)."""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable

from atom.config.errors import ConfigError
from atom.config.hosts import resolve_hosts
from atom.config.model_facts import is_gguf
from atom.config.schema import Config
from atom.config.validate import engine_problems
from atom.loader.hf_config import load_hf_config, model_source
from atom.loader.tokenizer import load_tokenizer
from atom.model_engine.engine_core import EngineCore, async_scheduling_enabled
from atom.model_engine.fast_codec import fast_codec
from atom.model_engine.scheduler import Scheduler
from atom.model_engine.scripted_core import ScriptedEngineCore
from atom.model_engine.synthetic_core import SyntheticEngineCore
from atom.spec_decode.proposer import build_proposer, draft_lookahead

if TYPE_CHECKING:
    from atom.model_engine.core_protocol import EngineCoreProtocol

# Imported inside the functions that use them: the rank side (runner_builder, executors,
# ParallelState) pulls torch, which the API process never needs, and the HTTP side (app,
# engine clients, headless node) pulls litestar and zmq, which an offline engine never needs.


def build_tokenizer(cfg: Config, announce: bool = True) -> Any:
    """The model's tokenizer (HF fast tokenizer from a dir or a GGUF), or an id-level fallback
    for dummy-weight models that name none. `announce=False`: the fallback is logged by another
    process (the server's core loads it for the EOS id only; the API process says it)."""
    return load_tokenizer(cfg, announce)


def build_core(cfg: Config, tokenizer: Any = None) -> "EngineCoreProtocol":
    """The engine core for `cfg.server.engine_source`: the model, or a stand-in token source."""
    source = cfg.server.engine_source
    if source == "synthetic":
        return SyntheticEngineCore(cfg)
    if source == "scripted":
        return ScriptedEngineCore(cfg, build_tokenizer(cfg))
    _refuse_what_cannot_run(cfg)
    _refuse_other_hosts(cfg)
    if cfg.parallel.data_parallel_size > 1:
        raise ConfigError("parallel.data_parallel_size", cfg.parallel.data_parallel_size,
                          "replicas run behind the server (python -m atom.run); an in-process "
                          "engine is one replica (set 1)")
    hf = load_hf_config(cfg)
    executor = build_executor(cfg, hf)
    eos = eos_token_ids(hf, _tokenizer_eos(cfg, tokenizer))
    p = cfg.parallel
    scheduler = Scheduler(cfg.scheduler, cfg.kv_cache, executor.num_blocks, eos,
                          executor.max_model_len, draft_lookahead(cfg.specdecode),
                          p.tensor_parallel_size if p.enable_dp_attention else 1)
    rt = cfg.runtime
    return EngineCore(executor, scheduler, build_proposer(cfg.specdecode),
                      async_scheduling_enabled(cfg.scheduler, executor.device_type),
                      rt.throughput_log_interval if rt.enable_log_stats else None)


def build_executor(cfg: Config, hf: Any) -> Any:
    """One process and device for tensor_parallel_size 1; else (or with parallel.executor=
    multiproc, tp=1 included) one worker process per rank, or one Ray actor per rank with
    parallel.executor=ray, each building its runner with the same function (handed over, as the
    workers run it)."""
    from atom.runner_builder import build_runner

    tp = cfg.parallel.tensor_parallel_size
    if cfg.parallel.executor == "ray":
        from atom.executor.ray_executor import RayExecutor

        return RayExecutor(cfg, hf, tp, build_runner)
    if tp > 1 or cfg.parallel.executor == "multiproc":
        from atom.executor.multiproc import MultiprocExecutor

        return MultiprocExecutor(cfg, hf, tp, build_runner)
    from atom.executor.uniproc import UniprocExecutor
    from atom.layers.parallel_state import ParallelState

    return UniprocExecutor(build_runner(cfg, hf, ParallelState()))


def eos_token_ids(hf: Any, tokenizer_eos: Any) -> set[int]:
    """Every id that ends a sequence: the model config's eos_token_id (an id or a list) and the
    tokenizer's, which may name another id: a sequence ends at any of them. The one place the
    set is made; the scheduler is handed it."""
    ids: set[int] = set()
    for v in (getattr(hf, "eos_token_id", None), tokenizer_eos):
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(int(x) for x in v)
    return ids


def run_headless_node(cfg: Config) -> int:
    """A host other than node 0 (parallel.node_rank > 0): its ranks only, until node 0 ends
    them; the exit status of atom.run there."""
    from atom.executor.headless import run_node
    from atom.runner_builder import build_runner

    _refuse_what_cannot_run(cfg)
    return run_node(cfg, load_hf_config(cfg), cfg.parallel.tensor_parallel_size, build_runner)


def _tokenizer_eos(cfg: Config, tokenizer: Any) -> Any:
    """The tokenizer's EOS id (eos_token_ids adds the model config's own): from the tokenizer the
    caller has, else one loaded for it; a model without a loadable tokenizer runs on ids. A
    GGUF's header is its tokenizer's: its EOS is already in the model config, and converting
    the GGUF vocabulary for it cost a first start ~15 s here, beside the API process doing the
    same."""
    if tokenizer is None and _is_gguf_model(cfg):
        return None
    if tokenizer is None:
        try:
            tokenizer = build_tokenizer(cfg, announce=False)  # the API process announces it
        except Exception as e:
            logging.getLogger("atom.engine").info("no tokenizer EOS for %s: %s", cfg.model.name, e)
            return None
    return getattr(tokenizer, "eos_token_id", None)


def _is_gguf_model(cfg: Config) -> bool:
    src = model_source(cfg) if cfg.load.dummy is None else None
    return src is not None and is_gguf(src)


def _refuse_what_cannot_run(cfg: Config) -> None:
    """What composes but the model engine cannot run (validate.engine_problems), refused here
    for configs that did not come through a launcher (which reports it with every other rule)."""
    errors = engine_problems(cfg)
    if errors:
        raise ConfigError.all_of(errors)


def _refuse_other_hosts(cfg: Config) -> None:
    """The engine and the API run on node 0 only: another host reaching them (an in-process
    engine, the flag launcher) would wait for ranks nobody starts."""
    node = resolve_hosts(cfg.parallel, os.environ).node_rank
    if node != 0:
        raise ConfigError("parallel.node_rank", node, "the engine and the API run on node 0; "
                          "start this host's ranks with python -m atom.run (headless)")


def build_app(cfg: Config, core_main: Callable[..., None]) -> Any:
    """The OpenAI server's Litestar app: engine core started in its own process (`core_main`,
    atom.core_process.run_core, handed in by the launcher: that module builds its core here),
    tokenizer loaded here meanwhile, then (once the model is loaded) the app over both. The app
    closes the core on shutdown."""
    from atom.serving.app import create_app
    from atom.model_engine.engine_client import EngineClient

    if cfg.server.engine_source == "model":
        _refuse_what_cannot_run(cfg)  # here too, so no core process is needed to report it
    _refuse_other_hosts(cfg)
    dp = cfg.parallel.data_parallel_size
    if dp > 1:
        from atom.model_engine.dp_engine_client import DataParallelEngineClient

        client: Any = DataParallelEngineClient(cfg, dp, core_main)
    else:
        client = EngineClient(cfg, core_main=core_main)
    client.launch()  # the core loads the model while this process loads the tokenizer
    try:
        tokenizer = fast_codec(build_tokenizer(cfg))  # per-token decode is the API's hot path
        client.set_tokenizer(tokenizer)
        client.wait_ready()
        return create_app(cfg, client, tokenizer=tokenizer)
    except BaseException:
        client.close()
        raise
