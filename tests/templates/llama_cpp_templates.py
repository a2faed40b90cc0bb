"""Real chat templates for tests, reproducibly: the pinned llama-cpp-python sdist from PyPI.

The sdist carries llama.cpp's `models/templates/*.jinja`, the real templates of the model
families atom reads (Qwen3, Qwen3-Coder, Qwen3.5, DeepSeek, Kimi, GLM, MiniMax, Llama-3.x). The
templates are extracted once into `$ATOM_CACHE_DIR/templates` (default ~/.cache/atom/templates);
a fresh machine downloads the sdist with pip (never from a model hub) and checks its hash.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
_MEMBER_DIR = "vendor/llama.cpp/models/templates/"
_DONE = ".complete"


def cache_dir() -> Path:
    root = os.environ.get("ATOM_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "atom"
    return base / "templates" / f"{PACKAGE}-{VERSION}"


def template_dir() -> Path:
    """The directory of .jinja files, downloading and extracting them on first use."""
    target = cache_dir()
    if (target / _DONE).exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        sdist = _download(Path(tmp))
        _extract(sdist, target)
    return target


def read_template(name: str) -> str:
    return (template_dir() / f"{name}.jinja").read_text(encoding="utf-8")


def _download(into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"{PACKAGE}=={VERSION}", "-d", str(into)],
                   check=True, timeout=900, capture_output=True)
    sdist = into / SDIST
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise RuntimeError(f"{SDIST}: sha256 {digest} != pinned {SDIST_SHA256}")
    return sdist


def _extract(sdist: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent))
    try:
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                name = member.name.split("/", 1)[-1]
                if member.isfile() and name.startswith(_MEMBER_DIR):
                    data = tar.extractfile(member)
                    assert data is not None
                    (staging / Path(name).name).write_bytes(data.read())
        (staging / _DONE).write_text(SDIST_SHA256)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
