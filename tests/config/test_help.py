"""Help for every field from one source, the schema's comments: `atom.run --help` describes each
field and the spec launcher's `--help` each flag, the way `vllm serve --help` does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from atom.config.flags import ENGINE_FLAGS, SERVER_FLAGS
from atom.config.help import fields, help_of, missing_help

REPO = Path(__file__).resolve().parents[2]


def test_every_config_field_has_help():
    """A new field needs a comment: the one above it or a trailing `# description`."""
    assert missing_help() == [], f"fields without a help comment: {missing_help()}"


def test_help_reads_the_comment_above_and_the_trailing_one():
    assert help_of("kv_cache.block_size") == "tokens per paged KV block (a power of two)"
    assert help_of("scheduler.async_scheduling").startswith("Build step N+1 on the host")
    assert help_of("bench.backend").startswith("the request protocol")  # not its section title


def test_run_help_lists_every_group_and_field_with_its_help():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "atom.run", "kv_cache=fp8", "--help"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "kv_cache: bf16, fp8" in out and "model: " in out
    assert "kv_cache.dtype=fp8 (str)" in out, "values are shown under the given overrides"
    for f in fields():
        assert f"{f.path}=" in out, f.path
        assert " ".join(f.help.split()) in out, f.path


def test_every_server_flag_has_help_from_its_field():
    from atom.entrypoints.openai_server import build_parser

    text = "".join(build_parser().format_help().split())  # argparse wraps lines, even at hyphens
    for flag in ENGINE_FLAGS + SERVER_FLAGS:
        assert help_of(flag.path), f"{flag.names[0]} sets {flag.path}, which has no help"
        assert f"config:{flag.path})" in text, flag.names[0]
        assert "".join(help_of(flag.path).split()) in text, flag.names[0]
