"""`runtime.cpu_threads`: an LLMEngine keyword and a CLI flag, and what 0 resolves to."""
from __future__ import annotations

import argparse

from atom.config.flags import ENGINE_FLAGS, add_cli_args, config_from_args, config_from_kwargs
from atom.runner.cpu_threads import available_cores, cpu_threads


def test_llm_engine_keyword_and_flag_reach_the_config():
    assert config_from_kwargs(cpu_threads=3).runtime.cpu_threads == 3
    p = argparse.ArgumentParser()
    add_cli_args(p, ENGINE_FLAGS)
    assert config_from_args(p.parse_args(["--cpu-threads", "2"])).runtime.cpu_threads == 2


def test_zero_is_every_core_offline_and_leaves_one_when_serving(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = available_cores()
    assert cpu_threads(0, serving=False) == cores
    assert cpu_threads(0, serving=True) == max(1, cores - 1)
    assert cpu_threads(5, serving=True) == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads(0, serving=False) == 1 and cpu_threads(4, serving=False) == 4
