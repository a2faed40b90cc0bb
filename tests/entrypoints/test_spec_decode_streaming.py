"""Several tokens per step through the server: with n-gram speculation a streamed completion is
byte-identical to the non-streamed one and to the plain engine's, stop strings included."""
from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from srv_process import MODEL_SERVERS, ServerProcess

PROMPT = "abcabcabcabcabc"


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    logs = tmp_path_factory.mktemp("spec_stream_logs")
    spec = ServerProcess(MODEL_SERVERS["tiny"] + ["--method", "ngram",
                                                  "--num-speculative-tokens", "4"],
                         log_path=logs / "spec.log", wait=False)
    plain = ServerProcess(MODEL_SERVERS["tiny"], log_path=logs / "plain.log")
    spec.wait_healthy()
    yield spec, plain
    spec.stop()
    plain.stop()


def _complete(srv: ServerProcess, stream: bool, **extra) -> str:
    body = {"model": "tiny_llama", "prompt": PROMPT, "max_tokens": 48, "temperature": 0,
            "ignore_eos": True, "stream": stream, **extra}
    if not stream:
        r = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]
    text = []
    with httpx.stream("POST", srv.base_url + "/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text += [c["text"] for c in json.loads(line[6:])["choices"]]
    return "".join(text)


def test_streamed_and_whole_outputs_match_plain_decoding(servers):
    spec, plain = servers
    want = _complete(plain, False)
    assert _complete(spec, False) == want
    assert _complete(spec, True) == want
    stats = httpx.get(spec.base_url + "/debug/mtp_stats", timeout=10).json()
    assert stats["total_accepted_tokens"] > 0, stats
    stop = want[len(want) // 2:len(want) // 2 + 2]
    cut = _complete(plain, False, stop=[stop])
    assert len(cut) < len(want)
    assert _complete(spec, False, stop=[stop]) == cut
    assert _complete(spec, True, stop=[stop]) == cut
