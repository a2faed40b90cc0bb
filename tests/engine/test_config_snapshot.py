"""Config snapshots (atom/loader/config_snapshot.py) give the models what the transformers class
gives: every attribute atom reads, for every architecture, and they spare later starts the
transformers import."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from atom.config.compose import compose
from atom.loader import config_snapshot
from atom.loader.hf_config import load_hf_config
from tests.engine.checkpoints import ALL_ARCHS, make_checkpoint

ROOT = Path(__file__).resolve().parents[2]
MISSING = object()


def attributes_atom_reads() -> set[str]:
    """Every `hf.<name>` / `getattr(hf, "<name>")` in the engine's sources: a new read is
    covered without editing this test."""
    names: set[str] = set()
    for sub in ("models", "layers", "runner", "loader", "spec_decode", "model_engine"):
        for f in (ROOT / "atom" / sub).rglob("*.py"):
            text = f.read_text()
            names |= set(re.findall(r"\bhf\.([a-z_][a-z0-9_]*)\b(?!\()", text))
            names |= set(re.findall(r"getattr\(hf, \"(\w+)\"", text))
    return names


def _value(config, name: str):
    v = getattr(config, name, MISSING)
    return str(v).removeprefix("torch.") if "dtype" in type(v).__name__ else v


def assert_same(real, snap) -> None:
    names = attributes_atom_reads() | set(real.to_dict())
    assert len(names) > 30
    differ = {n: (_value(real, n), _value(snap, n)) for n in sorted(names)
              if _value(real, n) != _value(snap, n)}
    assert not differ, differ


@pytest.mark.parametrize("model", ["qwen3_0_6b", "llama3_8b", "deepseek_r1", "tiny_qwen3",
                                   "tiny_llama", "tiny_deepseek_v3"])
def test_snapshot_of_a_config_dict_reads_as_the_class(model, tmp_path, monkeypatch):
    monkeypatch.setenv("ATOM_CACHE_DIR", str(tmp_path))
    cfg = compose([f"model={model}", "load=dummy"])
    real = load_hf_config(cfg, snapshot=False)
    first = load_hf_config(cfg)
    second = load_hf_config(cfg)
    assert type(first) is type(second) is config_snapshot.ConfigSnapshot
    assert len(list((tmp_path / "hf_configs").glob("*.json"))) == 1
    assert_same(real, first)
    assert_same(real, second)


@pytest.mark.parametrize("arch", sorted(ALL_ARCHS))
def test_snapshot_of_a_checkpoint_reads_as_the_class(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("ATOM_CACHE_DIR", str(tmp_path / "cache"))
    path = make_checkpoint(arch, tmp_path / "ckpt")
    cfg = compose([f"model.path={path}", "load=dummy"])
    assert_same(load_hf_config(cfg, snapshot=False), load_hf_config(cfg))


def test_a_changed_config_json_or_transformers_release_is_a_new_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("ATOM_CACHE_DIR", str(tmp_path / "cache"))
    path = make_checkpoint("qwen3", tmp_path / "ckpt")
    cfg = compose([f"model.path={path}", "load=dummy"])
    assert load_hf_config(cfg).rms_norm_eps == 1e-6
    d = json.loads((path / "config.json").read_text())
    d["rms_norm_eps"] = 1e-5
    (path / "config.json").write_text(json.dumps(d))
    assert load_hf_config(cfg).rms_norm_eps == 1e-5
    monkeypatch.setattr(config_snapshot, "_transformers_version", lambda: "0.0.0-other")
    load_hf_config(cfg)
    assert len(list((tmp_path / "cache" / "hf_configs").glob("*.json"))) == 3


def test_a_later_start_does_not_import_transformers(tmp_path):
    code = ("import sys, json; from atom.config.compose import compose;"
            "from atom.loader.hf_config import load_hf_config;"
            "h = load_hf_config(compose(['model=llama3_8b', 'load=dummy']));"
            "print(json.dumps([h.head_dim, h.rope_parameters, 'transformers' in sys.modules]))")
    env = {"ATOM_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                      capture_output=True, text=True).stdout) for _ in range(2)]
    assert runs[0][:2] == runs[1][:2]
    assert runs[0][2] is True and runs[1][2] is False
