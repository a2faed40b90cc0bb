"""Stepping an engine core that speculates: the tokens each step delivered per request, where
a run of accepted tokens put a token, and the chi-square test of sampled outputs against a
context-free target's chain, the engine and prompts the runner-side methods' tests share, and
the seeded-request check they all make, and the count of launches made before the step
before was read (async scheduling's overlap; shared by the speculative-decoding tests)."""
from __future__ import annotations

import torch
from scipy.stats import chisquare

from atom import SamplingParams
from atom.model_engine.messages import EngineRequest
from tests.engine.checkpoints import local_engine


def spec_engine(path, *extra: str):
    """An engine over a tiny checkpoint with 4-token KV blocks: drafts cross block edges."""
    return local_engine(path, "kv_cache.block_size=4", *extra)


def on_cuda_f32(kernels: str) -> tuple[str, ...]:
    """float32 on CUDA (bf16 near-ties would make the comparisons about rounding) with a fixed
    KV pool: each engine would otherwise claim 90% of the card, and one a test case before kept
    may not be collected yet."""
    return ("runtime.device=cuda", "model.dtype=float32", f"runtime.kernels={kernels}",
            "kv_cache.num_blocks=2048")


def spec_prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in (1, 6, 19, 33)]


def assert_seeded_request_is_the_same_alone_and_in_a_batch(engine, temperature: float,
                                                           max_tokens: int) -> None:
    """A seeded request's generator decides every number its target samples, its drafts and
    its rejection draws use, so the rows beside it (sampled, unseeded) change nothing."""
    prompts = spec_prompts()
    seeded = SamplingParams(temperature=temperature, top_k=3, max_tokens=max_tokens,
                            ignore_eos=True, seed=7)
    others = SamplingParams(temperature=0.5, max_tokens=max_tokens, ignore_eos=True)
    alone = engine.generate(prompts[1:2], seeded)[0]["token_ids"]
    ids = engine.add_request(prompts, others)
    mine = engine.add_request(prompts[1], seeded)[0]
    done: dict[str, list[int]] = {}
    while not engine.is_finished():
        for o in engine.step():
            done[o["request_id"]] = o["token_ids"]
    assert done[mine] == alone and len(ids) == 4
    assert engine.stats().spec_accepted_tokens > 0


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


def assert_stops_where_plain_stops(plain, spec, prompt: list[list[int]], how: str,
                                   max_tokens: int) -> None:
    """max_tokens, a stop token or EOS (`how`) at a position inside one of the speculating
    engine's accepted runs: both engines stop there, with the same tokens. EOS is the token at
    that position, set on both schedulers for the run and restored after."""
    greedy = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    chunks = run(spec, prompt, greedy)[0][0]
    full = flat(chunks)
    positions = inside_runs(chunks)
    assert positions, chunks
    engines = (plain, spec)
    eos = [e.core.scheduler.eos for e in engines]
    for p in positions[:3]:
        if how == "max_tokens":
            params = SamplingParams(temperature=0, max_tokens=p + 1, ignore_eos=True)
        elif how == "stop_token":
            params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True,
                                    stop_token_ids=[full[p]])
        else:
            params = SamplingParams(temperature=0, max_tokens=max_tokens)
            for e in engines:
                e.core.scheduler.eos = {full[p]}
        try:
            want = flat(run(plain, prompt, params)[0][0])
            got = flat(run(spec, prompt, params)[0][0])
        finally:
            for e, ids in zip(engines, eos):
                e.core.scheduler.eos = ids
        assert want == full[:p + 1]
        assert got == want, (how, p)


def transition(path, top_k: int, temperature: float) -> torch.Tensor:
    """P(next | token) of a context-free target (its logits at a position depend on that
    position's token only), truncated to top-k, from transformers."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(torch.arange(hf.config.vocab_size).unsqueeze(1)).logits[:, 0]
    top = logits.topk(top_k, -1)
    probs = torch.zeros_like(logits).scatter_(1, top.indices,
                                              (top.values / temperature).softmax(-1))
    return probs.double()


def chain_pvalue(outs: list[list[int]], P: torch.Tensor, x: int) -> float:
    """The chi-square p-value of the outputs of prompt [x] against the chain
    p(t1|x) p(t2|t1)...; every output must lie in the chain's support."""
    n, length = len(outs), len(outs[0])
    cells: dict[tuple[int, ...], int] = {}
    for t in outs:
        cells[tuple(t)] = cells.get(tuple(t), 0) + 1
    support = [(x,)]
    for _ in range(length):
        support = [(*s, t) for s in support for t in P[s[-1]].nonzero().flatten().tolist()]
    support = [s[1:] for s in support]
    assert set(cells) <= set(support)
    chain = lambda s: float(torch.prod(P[[x, *s[:-1]], list(s)]))  # noqa: E731
    mass = [chain(s) for s in support]
    expected = [n * m / sum(mass) for m in mass]  # the top-k renormalisation's rounding only
    observed = [cells.get(t, 0) for t in support]
    return float(chisquare(observed, expected).pvalue)


class Proposals(list):
    """The drafts of every propose recorded (Drafted), each read as the engine reads it."""

    def __getitem__(self, i):
        got = super().__getitem__(i)
        return [d.read() for d in got] if isinstance(i, slice) else got.read()

    def __iter__(self):
        return (d.read() for d in super().__iter__())

    def __eq__(self, other):
        return list(self) == list(other)


def record_proposals(runner) -> Proposals:
    """Every set of drafts the runner's drafter makes from now on (none without a drafter)."""
    made = Proposals()
    drafter = runner.drafter
    if drafter is not None:
        propose = drafter.propose

        def recorded(*args):
            out = propose(*args)
            made.append(out)
            return out

        drafter.propose = recorded
    return made


def record_graph_choices(runner, into: list[tuple[int, bool]]) -> None:
    """Per target step from now on, its longest query and whether a CUDA graph took it."""
    pick = runner._graphs_for

    def recorded(meta, n_tokens):
        graphs = pick(meta, n_tokens)
        into.append((meta.max_q_len, graphs is not None))
        return graphs

    runner._graphs_for = recorded


class Overlaps:
    """Counts the launches the executor got before the result of the step before was read."""

    def __init__(self, engine) -> None:
        self.count = self.launches = 0
        self._unread: set[int] = set()
        executor = engine.core.executor
        execute = executor.execute

        def counted(out):
            step = execute(out)
            self.launches += 1
            self.count += bool(self._unread)
            mine = id(step)
            self._unread.add(mine)
            result = step.result

            def read():
                self._unread.discard(mine)
                return result()

            step.result = read
            return step

        executor.execute = counted
