"""A second synthetic server for the reliability suite: a short context, tokens as fast as the
core loop turns (so schema-valid fuzz cases finish at once), an API key, a 1 s template budget,
and a chat template that misbehaves on request (`chat_template_kwargs`):

  spin       nested loops that never end        boom   raises an error from the template
  flood      writes far more than a prompt may   typo   a TypeError inside the template
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from srv_process import API_KEY, HELLO_IDS, ServerProcess

HOSTILE_TEMPLATE = """{% if spin %}{% for i in range(100000) %}{% for j in range(100000) %}\
{% endfor %}{% endfor %}{% endif %}\
{% if flood %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endif %}\
{% if boom %}{{ raise_exception('the template refuses') }}{% endif %}\
{% if typo %}{{ 1 + 'a' }}{% endif %}\
{% for m in messages %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

MAX_MODEL_LEN = 256


@pytest.fixture(scope="session")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("reliability")
    template = root / "hostile.jinja"
    template.write_text(HOSTILE_TEMPLATE)
    args = ["--model", "tiny_llama", "--load-dummy", "--engine-source", "synthetic",
            "--synthetic-tokens-per-s", "0", "--no-enable-log-stats", "--api-key", API_KEY,
            "--chat-template", str(template), "--torch-profiler-dir", str(root / "traces"),
            "--max-model-len", str(MAX_MODEL_LEN),
            # overrides last: argparse takes one run of positionals
            f"server.synthetic_token_ids={HELLO_IDS}", "kv_cache.num_blocks=65536",
            "server.chat_template_timeout_s=1.0", "server.profile_max_s=2.0",
            "server.profile_max_dir_bytes=1"]
    srv = ServerProcess(args, log_path=root / "server.log")
    yield srv
    srv.stop()
    assert srv.graceful, "SIGTERM did not stop the reliability server: " + srv.log_tail()
