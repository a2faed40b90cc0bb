"""Stop strings: the automaton agrees with a brute-force reading of the rule, its cost per
character does not grow with the number of stops, and over HTTP a request with the most stops
allowed still stops where it should."""
from __future__ import annotations

import random
import time

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from atom.model_engine.stop_strings import StopStringMatcher
from atom.serving.common.bounds import MAX_STOP_CHARS, MAX_STOP_STRINGS


def reference(text: str, stops: list[str], include: bool) -> tuple[str, bool]:
    """The first stop string to complete ends the text (the longest, if several end together)."""
    for end in range(1, len(text) + 1):
        best = max((len(s) for s in stops if text[:end].endswith(s)), default=0)
        if best:
            return text[: end if include else end - best], True
    return text, False


def withheld(text: str, stops: list[str]) -> int:
    """Characters at the end of `text` that could still begin a stop string."""
    for k in range(min(max(map(len, stops)) - 1, len(text)), 0, -1):
        if any(s.startswith(text[-k:]) for s in stops):
            return k
    return 0


@settings(max_examples=400, deadline=None, database=None)
@given(stops=st.lists(st.text("ab", min_size=1, max_size=5), min_size=1, max_size=5),
       text=st.text("abc", max_size=16), cuts=st.lists(st.integers(1, 4), min_size=16, max_size=16),
       include=st.booleans())
def test_matches_the_reference_however_the_text_is_cut(stops, text, cuts, include):
    m = StopStringMatcher(stops, include)
    i = 0
    for cut in cuts:
        if i >= len(text) or m.stopped:
            break
        m.feed(text[i:i + cut])
        i += cut
        if not m.stopped:
            assert m.releasable(False) == len(m.text) - withheld(m.text, stops)
    assert (m.text, m.stopped) == reference(text, stops, include)


def _us_per_char(stops: list[str], text: str) -> float:
    best = float("inf")
    for _ in range(3):
        m = StopStringMatcher(stops)
        t = time.perf_counter()
        for k in range(0, len(text), 4):
            m.feed(text[k:k + 4])
            m.releasable(False)
        best = min(best, time.perf_counter() - t)
    return best / len(text) * 1e6


def test_cost_per_character_does_not_grow_with_the_number_of_stops():
    """One stop against the most allowed, each as long as allowed, over text that keeps entering
    their prefixes: the old per-stop search cost ~64× here."""
    rng = random.Random(0)
    many = ["".join(rng.choice("abcd") for _ in range(MAX_STOP_CHARS)) for _ in range(MAX_STOP_STRINGS)]
    text = "".join(rng.choice("abcd ") for _ in range(40_000))
    one, all_ = _us_per_char(many[:1], text), _us_per_char(many, text)
    print(f"== stop matching: {one:.2f} us/char with 1 stop, {all_:.2f} with {MAX_STOP_STRINGS}")
    assert all_ < 3 * one


def test_most_stops_allowed_still_stop_the_stream(server, auth):
    """The synthetic core says "Hello " forever; one of 64 stops is "lo H"."""
    stops = [f"zz{i}" for i in range(MAX_STOP_STRINGS - 1)] + ["lo H"]
    r = httpx.post(server.base_url + "/v1/completions", headers=auth, timeout=30,
                   json={"prompt": "x", "max_tokens": 40, "stop": stops})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0] == {"index": 0, "text": "Hel", "finish_reason": "stop", "logprobs": None}
