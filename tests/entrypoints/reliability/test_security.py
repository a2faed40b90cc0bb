"""Issue 15's security rows over real HTTP: the API key on every route but /health (bearer in any
case, or x-api-key), hostile and runaway chat templates bounded in time and size without stalling
the server, model-side Python only with trust_remote_code, no path traversal, no local paths in
responses, and the profiler capped."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from atom.chat.encoders import (JinjaChatEncoder, TemplateRenderError,
                                load_chat_encoder, render_budget)
from atom.config.schema import Config
from atom.serving.common.context import model_aliases, served_model_name
from atom.serving.common.errors import public_reason
from srv_process import API_KEY

USER = [{"role": "user", "content": "hi"}]
ROUTES = [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/messages"),
          ("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/start_profile"),
          ("POST", "/stop_profile"), ("GET", "/openapi.json"), ("GET", "/schema/openapi.json")]


def test_every_route_but_health_needs_the_key(hostile_server):
    url = hostile_server.base_url
    documented = httpx.get(url + "/openapi.json", headers={"x-api-key": API_KEY}).json()["paths"]
    routes = set(ROUTES) | {(m.upper(), p) for p, ops in documented.items() for m in ops}
    assert ("GET", "/health") in routes
    for method, path in sorted(routes):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"},
                        {"Authorization": API_KEY}, {"Authorization": f"Basic {API_KEY}"}):
            r = httpx.request(method, url + path, headers=headers, json={}, timeout=10)
            if path == "/health":
                assert r.status_code == 200, (path, headers, r.text)
                continue
            assert r.status_code == 401, (method, path, headers, r.status_code)
            body = r.json()
            if path == "/v1/messages":
                assert body == {"type": "error", "error": {"type": "authentication_error",
                                                           "message": "Incorrect API key provided"}}
            else:
                assert body["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("headers", [{"Authorization": f"Bearer {API_KEY}"},
                                     {"Authorization": f"bearer {API_KEY}"},
                                     {"Authorization": f"BEARER  {API_KEY}"},
                                     {"x-api-key": API_KEY}])
def test_key_accepted_as_bearer_in_any_case_or_x_api_key(hostile_server, headers):
    url = hostile_server.base_url
    assert httpx.get(url + "/v1/models", headers=headers).status_code == 200
    r = httpx.post(url + "/v1/messages", headers=headers, timeout=30,
                   json={"max_tokens": 3, "messages": USER})
    assert r.status_code == 200 and r.json()["type"] == "message", r.text


def _chat(url: str, kwargs: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"x-api-key": API_KEY}, timeout=timeout,
                      json={"messages": USER, "max_tokens": 3, "chat_template_kwargs": kwargs})


@pytest.mark.parametrize("kwargs,says", [({"spin": True}, "time limit"),
                                         ({"flood": True}, "characters a prompt may have"),
                                         ({"boom": True}, "the template refuses"),
                                         ({"typo": True}, "TypeError")])
def test_hostile_template_fails_its_request_alone(hostile_server, kwargs, says):
    """A runaway loop, a flood of output, raise_exception and a TypeError: each a 400 within the
    1 s budget (+ slack), while /health keeps answering and the next request is served."""
    url = hostile_server.base_url
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            t = time.perf_counter()
            assert httpx.get(url + "/health", timeout=10).status_code == 200
            latencies.append(time.perf_counter() - t)
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    t = time.perf_counter()
    try:
        r = _chat(url, kwargs)
    finally:
        done.set()
        prober.join()
    took = time.perf_counter() - t
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages" and err["code"] == "invalid_messages" and says in err["message"]
    assert took < 3.0, took
    assert max(latencies) < 0.5, latencies
    assert _chat(url, {}).status_code == 200


HOSTILE = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "repeat": "{{ 'x' * 1000000000 }}",
    "pad": "{{ 'x'.ljust(1000000000) }}",
    "filter pad": "{{ 'x'|center(1000000000) }}",
    "doubling": "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                "{% endfor %}{{ ns.s }}",
    "squaring": "{% set ns = namespace(x=10) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}"
                "{% endfor %}{{ ns.x }}",
    "power tower": "{% set ns = namespace(x=10) %}{% for i in range(9) %}{% set ns.x = ns.x ** 64 %}"
                   "{% endfor %}{{ ns.x }}",
    "% width": "{{ '%0999999999d' % 1 }}",
    "format width": "{{ '{:>999999999}'.format('x') }}",
    "format filter": "{{ '%0999999999d'|format(1) }}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "output flood": "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    "escape attempt": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_template_is_bounded(name):
    """Each is refused within its 1 s budget (+ slack) without allocating what it asks for."""
    encoder = JinjaChatEncoder(HOSTILE[name])
    t = time.perf_counter()
    with pytest.raises(TemplateRenderError), render_budget(1.0, 100_000):
        encoder.render(USER)
    assert time.perf_counter() - t < 2.0


def test_runaway_templates_in_parallel_leave_the_server_serving(hostile_server):
    """More runaway renders than worker threads: each ends at its deadline, none stays behind."""
    url = hostile_server.base_url
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(_chat(url, {"spin": True}).status_code))
               for _ in range(8)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [400] * 8
    assert time.perf_counter() - t < 8.0
    assert _chat(url, {}).status_code == 200


def test_model_side_python_runs_only_with_trust_remote_code(tmp_path: Path):
    marker = tmp_path / "executed"
    enc = tmp_path / "encoding"
    enc.mkdir()
    (enc / "encoding_evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "def encode_messages(messages, **kw):\n    return 'rendered'\n")
    assert load_chat_encoder(tmp_path, None, trust_remote_code=False) is None
    assert not marker.exists()
    trusted = load_chat_encoder(tmp_path, None, trust_remote_code=True)
    assert trusted is not None and trusted.render(USER) == "rendered" and marker.exists()


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/v1/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                                  "/v1/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/static/../../etc/passwd",
                                  "/schema/../../../etc/passwd", "//etc/passwd"])
def test_no_path_traversal(hostile_server, path):
    r = httpx.get(hostile_server.base_url + path, headers={"x-api-key": API_KEY}, timeout=10)
    assert r.status_code in (401, 404), (path, r.status_code)
    assert "root:" not in r.text


def test_model_field_is_a_name_not_a_path(hostile_server):
    r = httpx.post(hostile_server.base_url + "/v1/completions", headers={"x-api-key": API_KEY},
                   json={"prompt": "x", "max_tokens": 2, "model": "../../../../etc/passwd"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert "root:" not in r.text


def test_no_local_paths_in_model_names_or_failures():
    cfg = Config()
    cfg.model.name, cfg.model.path, cfg.model.served_model_name = "local", "/srv/models/Qwen3-0.6B", None
    assert served_model_name(cfg) == "Qwen3-0.6B"
    assert "/srv/models/Qwen3-0.6B" in model_aliases(cfg)  # a client may still send the path
    assert "Qwen3-0.6B" in model_aliases(cfg), "the name /v1/models lists is accepted"
    trace = ('Traceback (most recent call last):\n  File "/work/atom/model_engine/core_loop.py", line 9\n'
             "OverflowError: Python int too large to convert to C long (/work/atom/sampler.py)")
    assert public_reason(trace) == "OverflowError: Python int too large to convert to C long (sampler.py)"
    assert public_reason("engine core exited (exit code -9)") == "engine core exited (exit code -9)"


def test_profiler_is_capped_in_time_and_disk(hostile_server):
    """A trace the client never stops is stopped by the server after server.profile_max_s (2 s
    here); once the trace directory holds server.profile_max_dir_bytes (1 byte here) a new
    start is refused with 507."""
    url, key = hostile_server.base_url, {"x-api-key": API_KEY}
    r = httpx.post(url + "/start_profile", headers=key, timeout=60)
    assert r.status_code == 200, r.text
    trace_dir = Path(r.json()["profiler_dir"])
    deadline = time.monotonic() + 30
    while not list(trace_dir.rglob("*.json.gz")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(trace_dir.rglob("*.json.gz")), "the server did not stop the trace by itself"
    full = httpx.post(url + "/start_profile", headers=key, timeout=60)
    assert full.status_code == 507 and full.json()["error"]["code"] == "profiler_dir_full", full.text
    assert httpx.get(url + "/health").status_code == 200
