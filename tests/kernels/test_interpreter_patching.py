"""The kernel tests' interpreter speed-up (interpreter_patching.py): with it, a launch runs
Triton's language patching once per module instead of once per nested jit call, and the kernel
computes what it computes without it."""
from __future__ import annotations

import os

import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.rms_norm import rms_norm
from tests.kernels.interpreter_patching import nested_calls_reuse_the_launch_patch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="only the interpreter is patched")
ROWS = 8  # programs, each calling the nested load_row and norm_row


def _launch() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(ROWS, 96, generator=g), torch.randn(96, generator=g)
    out = rms_norm(x, w, 1e-6)
    torch.testing.assert_close(out, torch_ref.rms_norm(x, w, 1e-6), rtol=1e-5, atol=1e-5)
    return out


def test_a_launch_patches_each_module_once_and_computes_the_same(monkeypatch):
    from triton.runtime import interpreter

    def bare(f):  # under the session fixture's wrappers, the interpreter's own function
        return getattr(f, "__wrapped__", f)

    monkeypatch.setattr(interpreter.GridExecutor, "__call__",
                        bare(interpreter.GridExecutor.__call__))
    inner = bare(interpreter._patch_lang)
    calls = [0]

    def counted(fn):
        calls[0] += 1
        return inner(fn)

    monkeypatch.setattr(interpreter, "_patch_lang", counted)
    want = _launch()
    every_call, calls[0] = calls[0], 0
    with nested_calls_reuse_the_launch_patch():
        got = _launch()
    assert torch.equal(got, want)
    assert every_call >= 1 + 2 * ROWS, "the launch, then each nested call of each program"
    assert calls[0] <= 2, "the launch's modules (triton.language, then its core) once each"
