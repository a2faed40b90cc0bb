"""Stepping an engine core that speculates: the tokens each step delivered per request, and
where a run of accepted tokens put a token (shared by the speculative-decoding tests)."""
from __future__ import annotations

from atom import SamplingParams
from atom.model_engine.messages import EngineRequest


def run(engine, prompts, params: SamplingParams) -> tuple[list[list[list[int]]], int]:
    """Steps the core; returns each request's tokens as the chunks steps delivered, and the
    number of steps."""
    core = engine.core
    for i, p in enumerate(prompts):
        core.add_request(EngineRequest(request_id=str(i), prompt_token_ids=p,
                                       sampling_params=params))
    chunks: dict[str, list[list[int]]] = {str(i): [] for i in range(len(prompts))}
    steps = 0
    while core.has_unfinished():
        for o in core.step():
            if o.new_token_ids:
                chunks[o.request_id].append(o.new_token_ids)
        steps += 1
    s = core.stats()
    assert s.kv_blocks_free == s.kv_blocks_total  # rejected drafts' blocks came back too
    return [chunks[str(i)] for i in range(len(prompts))], steps


def flat(chunks: list[list[int]]) -> list[int]:
    return [t for c in chunks for t in c]


def inside_runs(chunks: list[list[int]]) -> list[int]:
    """Output positions that arrived after another token of the same step (inside an accepted
    run), each the first occurrence of its token in the output."""
    tokens, seen, out, p = flat(chunks), set(), [], 0
    first = {t: tokens.index(t) for t in set(tokens)}
    for c in chunks:
        for j, t in enumerate(c):
            if j > 0 and first[t] == p + j and t not in seen:
                out.append(p + j)
            seen.add(t)
        p += len(c)
    return out
