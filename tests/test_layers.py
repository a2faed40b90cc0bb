"""The package layers hold: import-linter's contracts in pyproject.toml, run as CI runs them."""
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    exe = shutil.which("lint-imports")
    assert exe is not None, "import-linter is a test dependency (pyproject.toml [test])"
    r = subprocess.run([exe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout
    assert "layers KEPT" in r.stdout  # the whole documented order, one contract
