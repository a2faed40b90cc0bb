"""`python -m atom.benchmarks.cpu_vs_llamacpp`: atom's CPU path against llama.cpp on one GGUF.

Both engines, in one command, at the same thread count: greedy decode of `--max-tokens` new
tokens after short prompts, one stream and batches of `--batch` streams (distinct prompts, so
no prefix is shared). The rate is decode only: from the step at which every stream has its
first token to the last one. llama.cpp runs through llama-cpp-python (`pip install
'atom[bench-cpu]'`): its high-level API for one stream, its batch API (one sequence id per
stream, one llama_decode per step) for the batches. The two alternate, repeat by repeat. Prints
one line per case with the ratios, and writes them as JSON with `--out`. A shared machine skews
both (two OpenMP threads with a core taken stall at every barrier): check the load first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from typing import Any
import atom
from atom import SamplingParams
from atom.loader.hf_config import model_source

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, there was a",
           "The three primary colors are", "Water boils at a temperature of",
           "My favourite recipe for bread", "In 1969, the first", "The best way to learn"]


def prompts_for(n: int) -> list[str]:
    return [f"{PROMPTS[i % len(PROMPTS)]} (#{i})" if i >= len(PROMPTS) else PROMPTS[i]
            for i in range(n)]


# -- atom ---------------------------------------------------------------------------------------
def atom_engine(threads: int, extra: list[str]) -> Any:
    return atom.build_engine(atom.compose(["load.progress_bar=false", "runtime.device=cpu",
                                           f"runtime.cpu_threads={threads}",
                                           "runtime.enable_log_stats=false", *extra]))


def atom_decode_rate(engine: Any, n: int, max_tokens: int) -> float:
    """Decode tokens per second of n streams after every stream has its first token."""
    counts: dict[str, int] = {}
    marks: list[float] = []

    def on_output(out: Any) -> None:
        counts[out.request_id] = counts.get(out.request_id, 0) + len(out.token_ids)

    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    engine.add_request(prompts_for(n), sp, stream_callback=on_output)
    base = 0
    while not engine.is_finished():
        engine.step()
        if not marks and len(counts) == n:
            marks.append(time.perf_counter())
            base = sum(counts.values())
    return (n * max_tokens - base) / (time.perf_counter() - marks[0])


# -- llama.cpp ----------------------------------------------------------------------------------
class LlamaCpp:
    def __init__(self, path: str, threads: int, max_streams: int, ctx_per_stream: int) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(path, n_threads=threads, n_threads_batch=threads,
                                   n_ctx=ctx_per_stream, verbose=False)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = ctx_per_stream * max_streams
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = max_streams
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True
        self.ctx = llama_cpp.llama_init_from_model(self.llm.model, params)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)
        self.n_vocab = self.llm.n_vocab()

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)
        self.llm.close()

    def single_rate(self, max_tokens: int) -> float:
        tokens = self.llm.tokenize(PROMPTS[0].encode())
        gen = self.llm.generate(tokens, temp=0.0, reset=True)
        next(gen)
        start = time.perf_counter()
        for _ in range(max_tokens - 1):
            next(gen)
        return (max_tokens - 1) / (time.perf_counter() - start)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """items: (token, position, sequence, wants logits)."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (tok, pos, seq, out) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, out
            b.seq_id[i][0] = seq
        if self.lib.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")

    def _argmax(self, i: int) -> int:
        import numpy as np

        row = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))
        return int(row.argmax())

    def batch_rate(self, n: int, max_tokens: int) -> float:
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)
        prompts = [self.llm.tokenize(p.encode()) for p in prompts_for(n)]
        items = [(t, j, s, j == len(p) - 1) for s, p in enumerate(prompts) for j, t in enumerate(p)]
        self._decode(items)
        last = [i for i, it in enumerate(items) if it[3]]
        nxt = [self._argmax(i) for i in last]
        pos = [len(p) for p in prompts]
        start = time.perf_counter()
        for _ in range(max_tokens - 1):
            self._decode([(nxt[s], pos[s], s, True) for s in range(n)])
            nxt = [self._argmax(s) for s in range(n)]
            pos = [p + 1 for p in pos]
        return n * (max_tokens - 1) / (time.perf_counter() - start)


# -- the run ------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    import platform

    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    try:
        commit = os.environ.get("ATOM_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=os.path.dirname(__file__)).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "load_1min": os.getloadavg()[0],
            "torch": torch.__version__, "commit": commit}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2_135m", help="a conf/model entry with a GGUF")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, nargs="*", default=[8, 32])
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("overrides", nargs="*", default=[], help="Hydra overrides for atom")
    args = p.parse_args()

    path = str(model_source(atom.compose([f"model={args.model}"])))
    info = machine()
    print(f"== {path}\n== {info}")
    engine = atom_engine(args.threads, [f"model={args.model}", *args.overrides])
    atom_decode_rate(engine, 1, 8)  # warm-up
    ref = LlamaCpp(path, args.threads, max(args.batch or [1]), 64 + args.max_tokens)
    ref.single_rate(8)
    rows = []
    for n in [1, *args.batch]:
        ours, theirs = [], []
        for _ in range(args.repeats):  # alternated, so a change in the machine's load hits both
            theirs.append(ref.single_rate(args.max_tokens) if n == 1 else
                          ref.batch_rate(n, args.max_tokens))
            ours.append(atom_decode_rate(engine, n, args.max_tokens))
        rows.append({"streams": n, "atom_tok_s": statistics.median(ours),
                     "llamacpp_tok_s": statistics.median(theirs), "atom_runs": ours,
                     "llamacpp_runs": theirs})
    ref.close()
    single_ref = rows[0]["llamacpp_tok_s"]
    for r in rows:
        r["atom_over_llamacpp"] = r["atom_tok_s"] / r["llamacpp_tok_s"]
        r["atom_over_llamacpp_single"] = r["atom_tok_s"] / single_ref
        print(f"threads={args.threads} streams={r['streams']:3d}  atom {r['atom_tok_s']:8.1f} tok/s"
              f"  llama.cpp {r['llamacpp_tok_s']:8.1f} tok/s  atom/llama.cpp "
              f"{r['atom_over_llamacpp']:.2f}  atom/llama.cpp single-stream "
              f"{r['atom_over_llamacpp_single']:.2f}")
    info["load_1min_end"] = os.getloadavg()[0]
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": info, "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
