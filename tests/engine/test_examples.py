"""The spec's example scripts run on CPU with the embedded default model."""
from __future__ import annotations

import subprocess
import sys


def test_simple_inference_prints_four_answers():
    r = subprocess.run([sys.executable, "-m", "atom.examples.simple_inference", "--temperature", "0",
                        "--max-tokens", "24", "load.progress_bar=false"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("Prompt: ") == 4
    assert r.stdout.count("Completion: ") == 4
    assert "MTP Statistics" in r.stdout
    assert "prime" in r.stdout.lower()
