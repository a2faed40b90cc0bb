"""Kernel tests run the Triton kernels on CPU through Triton's interpreter when there is no GPU.

TRITON_INTERPRET must be set before any `@triton.jit` runs (decoration reads it), so it is set
here, at collection, ahead of every test module's imports. Without triton installed the whole
directory skips with the reason; the CPU machines get it from the `triton` extra.
"""
import importlib.util
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
HAS_TRITON = importlib.util.find_spec("triton") is not None

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

collect_ignore_glob = [] if HAS_TRITON else ["test_*.py"]


def pytest_report_header(config):
    if not HAS_TRITON:
        return "kernels: triton is not installed; tests/kernels skipped (pip install 'atom[triton]')"
    mode = "CUDA" if HAS_CUDA else "CPU via TRITON_INTERPRET=1"
    return f"kernels: triton kernels run on {mode}"


@pytest.fixture(scope="session", autouse=True)
def _interpreter_patches_once_a_launch():
    """See interpreter_patching.py: the interpreted kernels' repeated patching skipped."""
    if HAS_CUDA or not HAS_TRITON or os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from tests.kernels.interpreter_patching import nested_calls_reuse_the_launch_patch

    with nested_calls_reuse_the_launch_patch():
        yield
