"""Building and loading the cpu backend's C kernels: built once per machine and source, and a
machine where they cannot be built runs the torch ops instead of failing."""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys

import pytest
import torch

from atom.kernels import cpu_backend, cpu_native, get_backend
from tests.cpu.test_cpu_backend import BF16_TOL, _quantized_linear, rel_err


needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler: the C kernels cannot be built here")


@needs_cc
def test_built_once_then_loaded_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cpu_native.load() is not None
    built = list((tmp_path / "atom" / "native").glob("atom_cpu_*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    assert cpu_native.load() is not None
    assert [p.stat().st_mtime_ns for p in built] == [stamp]
    assert not list((tmp_path / "atom" / "native").glob("tmp*"))  # no half-written file left


def test_without_a_compiler_the_backend_runs_its_torch_ops(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with caplog.at_level(logging.WARNING, logger=cpu_native.__name__):
        be = cpu_backend.CpuBackend()
    assert be._native is None and "did not build" in caplog.text
    lin, w = _quantized_linear(96, 256)
    x, residual, norm_w = torch.randn(2, 256), torch.randn(2, 256), torch.rand(256) + 0.5
    y, h = be.add_rms_norm_linear(x, residual, norm_w, 1e-5, lin)
    ref_y, ref_h = get_backend("torch").add_rms_norm_linear(x, residual, norm_w, 1e-5, w)
    assert torch.equal(h, ref_h) and rel_err(y, ref_y) < BF16_TOL


@needs_cc
def test_loading_leaves_the_process_s_floats_ieee(tmp_path):
    """The library is compiled with -ffast-math but not linked with it: linked, gcc's
    crtfastmath.o would set flush-to-zero for the whole process (hypothesis refuses to run then,
    and every subnormal in torch becomes 0)."""
    code = ("import sys, torch; from atom.kernels import cpu_native; assert cpu_native.load();"
            "x = sys.float_info.min; assert x / 2 > 0;"
            "assert (torch.tensor([1e-39]) * 1.0).item() > 0")
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
